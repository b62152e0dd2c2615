//! Tests of the whole layer: the shipped file, every validation error with its exact message,
//! and the precedence of flags over the file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use super::*;

fn unsigned(name: &str) -> FieldConfig {
    FieldConfig {
        name: name.to_owned(),
        field_type: FieldType::Unsigned,
        is_nullable: false,
    }
}

fn tree_part(field_number: u32, field_type: FieldType) -> IndexPartConfig {
    IndexPartConfig {
        field_number,
        field_type,
        is_nullable: false,
        collation: None,
    }
}

#[test]
fn shipped_file_resolves_to_exact_values() {
    let config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped file is valid");
    let listen: SocketAddr = "127.0.0.1:3301".parse().unwrap();
    assert_eq!(config.listen, listen);
    assert_eq!(config.shard_count, 0);
    assert_eq!(config.source, ConfigSource::Text);
    assert_eq!(config.data_dir, working_dir().join("data"));
    assert_eq!(config.memory_bytes, 1 << 30);
    assert_eq!(config.max_connections, 10_000);
    assert_eq!(config.max_packet_size_bytes, 16 << 20);
    assert_eq!(config.log_level, LogLevel::Info);
    assert_eq!(config.bucket_count, 3000);
    assert_eq!(config.idle_poll, std::time::Duration::from_micros(200));
    assert_eq!(
        config.sched_slice,
        Some(std::time::Duration::from_micros(100))
    );
    assert_eq!(
        config.durability,
        Durability {
            wal_mode: WalMode::Write,
            wal_max_file_size_bytes: 64 << 20,
            checkpoint_interval_seconds: 3600,
            checkpoint_count: 2,
            force_recovery: false,
        }
    );
    assert_eq!(
        config.access,
        AccessConfig {
            guest: Grants::ALL,
            users: vec![],
        }
    );

    let primary_on_id = IndexConfig {
        name: "primary".to_owned(),
        index_type: IndexType::Tree,
        type_name: "TREE".to_owned(),
        unique: true,
        parts: vec![tree_part(0, FieldType::Unsigned)],
    };
    let kv = SpaceConfig {
        id: 512,
        name: "kv".to_owned(),
        placement: Placement::All,
        format: vec![
            unsigned("id"),
            unsigned("bucket_id"),
            FieldConfig {
                name: "value".to_owned(),
                field_type: FieldType::String,
                is_nullable: false,
            },
        ],
        indexes: vec![primary_on_id.clone()],
        is_sync: false,
    };
    let customers = SpaceConfig {
        id: 513,
        name: "customers".to_owned(),
        placement: Placement::All,
        format: vec![
            unsigned("id"),
            unsigned("bucket_id"),
            unsigned("a"),
            unsigned("b"),
            unsigned("c"),
            unsigned("d"),
            FieldConfig {
                name: "name".to_owned(),
                field_type: FieldType::String,
                is_nullable: false,
            },
        ],
        indexes: vec![
            primary_on_id,
            IndexConfig {
                name: "composite".to_owned(),
                index_type: IndexType::Tree,
                type_name: "TREE".to_owned(),
                unique: false,
                parts: vec![
                    tree_part(2, FieldType::Unsigned),
                    tree_part(3, FieldType::Unsigned),
                    tree_part(4, FieldType::Unsigned),
                    tree_part(5, FieldType::Unsigned),
                    tree_part(6, FieldType::String),
                ],
            },
            IndexConfig {
                name: "bucket_id".to_owned(),
                index_type: IndexType::Tree,
                type_name: "TREE".to_owned(),
                unique: false,
                parts: vec![tree_part(1, FieldType::Unsigned)],
            },
        ],
        is_sync: false,
    };
    assert_eq!(config.spaces, vec![kv, customers]);
    assert_eq!(
        config.space("customers").unwrap().field_number("name"),
        Some(6)
    );
    assert_eq!(config.space("kv").unwrap().primary_index().name, "primary");
}

#[test]
fn empty_file_takes_defaults_and_grants_guest_nothing() {
    let config = Config::from_toml_str("").unwrap();
    assert_eq!(config.listen, "127.0.0.1:3301".parse().unwrap());
    assert_eq!(config.memory_bytes, 1 << 30);
    assert_eq!(config.durability.wal_mode, WalMode::Write);
    assert_eq!(config.data_dir, working_dir().join("data"));
    assert_eq!(config.idle_poll, std::time::Duration::from_micros(200));
    assert_eq!(
        config.sched_slice,
        Some(std::time::Duration::from_micros(100))
    );
    assert_eq!(config.access.guest, Grants::default());
    assert!(config.spaces.is_empty());
}

#[test]
fn rich_space_resolves_parts_users_and_sizes() {
    let text = r#"
        memory = 67108864
        max_packet_size = "512KiB"
        wal_mode = "fsync"
        [guest]
        grants = []
        [[user]]
        name = "bench"
        password = "secret"
        grants = ["read", "execute"]
        [[space]]
        name = "people"
        id = 600
        shard = "single"
        format = [ { name = "id", type = "uint" },
                   { name = "email", type = "str" },
                   { name = "score", type = "scalar", is_nullable = true },
                   { name = "tags", type = "array" } ]
        [[space.index]]
        name = "pk"
        type = "hash"
        parts = [1]
        [[space.index]]
        name = "email"
        parts = [{ field = "email", collation = "unicode_ci" }]
        [[space.index]]
        name = "score"
        unique = false
        parts = [{ field = 3, type = "integer", is_nullable = true }, "id"]
    "#;
    let config = Config::from_toml_str(text).unwrap();
    assert_eq!(config.memory_bytes, 64 << 20);
    assert_eq!(config.max_packet_size_bytes, 512 << 10);
    assert_eq!(config.durability.wal_mode, WalMode::Fsync);
    assert_eq!(config.access.guest, Grants::default());
    assert_eq!(config.access.users.len(), 1);
    let user = &config.access.users[0];
    assert_eq!(user.name, "bench");
    assert_eq!(user.password, "secret");
    assert_eq!(
        user.grants,
        Grants {
            read: true,
            write: false,
            execute: true
        }
    );
    assert!(!format!("{user:?}").contains("secret"));

    let space = &config.spaces[0];
    assert_eq!(space.placement, Placement::Single);
    assert_eq!(space.format[0].field_type, FieldType::Unsigned);
    assert_eq!(space.format[1].field_type, FieldType::String);
    assert_eq!(space.indexes[0].index_type, IndexType::Hash);
    assert_eq!(
        space.indexes[0].parts,
        vec![tree_part(0, FieldType::Unsigned)]
    );
    assert!(space.indexes[1].unique);
    assert_eq!(
        space.indexes[1].parts,
        vec![IndexPartConfig {
            field_number: 1,
            field_type: FieldType::String,
            is_nullable: false,
            collation: Some(CollationConfig::UnicodeCi),
        }]
    );
    assert_eq!(
        space.indexes[2].parts,
        vec![
            IndexPartConfig {
                field_number: 2,
                field_type: FieldType::Integer,
                is_nullable: true,
                collation: None,
            },
            tree_part(0, FieldType::Unsigned),
        ]
    );
}

/// A valid one-space file with `extra` spliced after the first index of the space.
fn kv_with(extra: &str) -> String {
    format!(
        r#"
        [[space]]
        name = "kv"
        id = 512
        format = [ {{ name = "id", type = "unsigned" }},
                   {{ name = "value", type = "string" }},
                   {{ name = "note", type = "string", is_nullable = true }},
                   {{ name = "blob", type = "map" }} ]
        [[space.index]]
        name = "primary"
        parts = ["id"]
        {extra}
        "#
    )
}

#[track_caller]
fn assert_invalid(text: &str, expected: &str) {
    match Config::from_toml_str(text) {
        Err(error @ ConfigError::Invalid { .. }) => assert_eq!(error.to_string(), expected),
        other => panic!("expected Invalid({expected:?}), got {other:?}"),
    }
}

#[track_caller]
fn assert_syntax(text: &str, expected_fragment: &str) {
    match Config::from_toml_str(text) {
        Err(error @ ConfigError::Syntax { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains(expected_fragment),
                "{message:?} lacks {expected_fragment:?}"
            );
        }
        other => panic!("expected Syntax containing {expected_fragment:?}, got {other:?}"),
    }
}

#[test]
fn kv_template_is_valid() {
    let config = Config::from_toml_str(&kv_with("")).unwrap();
    assert_eq!(config.spaces[0].indexes.len(), 1);
}

#[test]
fn unknown_keys_are_refused() {
    assert_syntax("listne = \"127.0.0.1:1\"", "unknown field `listne`");
    assert_syntax(&kv_with("uniq = true"), "unknown field `uniq`");
    assert_syntax(
        "[[space]]\nname = \"x\"\nid = 512\nengine = \"memtx\"",
        "unknown field `engine`",
    );
    assert_syntax(
        &kv_with(
            "[[space.index]]\nname = \"v\"\nunique = false\nparts = [{ field = \"value\", \
             sort_order = \"desc\" }]",
        ),
        "unknown field `sort_order`",
    );
    assert_syntax("[guest]\ngrant = []", "unknown field `grant`");
    assert_syntax("memory = -5", "a size cannot be negative, got -5");
}

#[test]
fn scalar_settings_are_checked() {
    assert_invalid(
        "listen = \"localhost:3301\"",
        "listen: \"localhost:3301\" is not a socket address; write IP:PORT such as \
         \"127.0.0.1:3301\" or \"[::1]:3301\" (host names are not resolved)",
    );
    assert_invalid(
        "shards = 5000",
        "shards: 5000 is outside 0..=1024 (0 means one per core)",
    );
    assert_invalid(
        "data_dir = \"\"",
        "data_dir: must not be empty (write \".\" for the working directory)",
    );
    assert_invalid(
        "memory = \"2GB\"",
        "memory: \"2GB\" uses the decimal unit \"GB\", which is ambiguous; write 2GiB for \
         2·2^30 bytes, or the exact number of bytes",
    );
    assert_invalid(
        "memory = \"1MiB\"",
        "memory: 1048576 bytes is too small; it must be at least 16MiB",
    );
    assert_invalid(
        "max_connections = 0",
        "max_connections: 0 is outside 1..=1000000",
    );
    assert_invalid(
        "max_packet_size = \"2GiB\"",
        "max_packet_size: 2147483648 bytes is too large; it must be between 1KiB and 1GiB",
    );
    assert_invalid(
        "log_level = \"verbose\"",
        "log_level: \"verbose\" is not one of error, warn, info, debug, trace",
    );
    assert_invalid(
        "wal_mode = \"fsyn\"",
        "wal_mode: \"fsyn\" is not one of none, write, fsync",
    );
    assert_invalid(
        "wal_max_file_size = 1000",
        "wal_max_file_size: 1000 bytes is too small; it must be at least 1MiB",
    );
    assert_invalid(
        "checkpoint_count = 0",
        "checkpoint_count: 0 is outside 1..=4294967295",
    );
    assert_invalid(
        "bucket_count = 0",
        "bucket_count: 0 is outside 1..=4294967295",
    );
    assert_invalid(
        "idle_poll_us = 1001",
        "idle_poll_us: 1001 is outside 0..=1000",
    );
    assert_invalid(
        "sched_slice_us = 99",
        "sched_slice_us: 99 is neither 0 (the kernel's default) nor in 100..=100000",
    );
    assert_invalid(
        "sched_slice_us = 100001",
        "sched_slice_us: 100001 is neither 0 (the kernel's default) nor in 100..=100000",
    );
}

#[test]
fn access_is_checked() {
    assert_invalid(
        "[guest]\ngrants = [\"read\", \"admin\"]",
        "guest.grants: grant \"admin\" is not one of read, write, execute",
    );
    assert_invalid(
        "[guest]\ngrants = [\"read\", \"read\"]",
        "guest.grants: grant \"read\" is listed twice",
    );
    let user = |name: &str, password: &str, grants: &str| {
        format!("[[user]]\nname = {name:?}\npassword = {password:?}\ngrants = {grants}\n")
    };
    assert_invalid(
        &user("admin", "x", "[]"),
        "user[0] \"admin\": guest and admin are built-in users; configure guest under [guest] \
         and pick another name",
    );
    assert_invalid(
        &user("guest", "x", "[]"),
        "user[0] \"guest\": guest and admin are built-in users; configure guest under [guest] \
         and pick another name",
    );
    assert_invalid(
        &user("", "x", "[]"),
        "user[0] \"\": a user name must not be empty",
    );
    assert_invalid(
        &format!("{}{}", user("bench", "x", "[]"), user("bench", "y", "[]")),
        "user[1] \"bench\": name is already used by user[0]",
    );
    assert_invalid(
        &user("bench", "", "[]"),
        "user[0] \"bench\": password must not be empty (a user without one could never \
         authenticate)",
    );
    assert_invalid(
        &user("bench", "x", "[\"select\"]"),
        "user[0] \"bench\": grants: grant \"select\" is not one of read, write, execute",
    );
}

#[test]
fn spaces_are_checked() {
    let second = |name: &str, id: u32| {
        format!(
            "[[space]]\nname = {name:?}\nid = {id}\nformat = [{{ name = \"id\", type = \
             \"unsigned\" }}]\n[[space.index]]\nname = \"primary\"\nparts = [\"id\"]\n"
        )
    };
    assert_invalid(
        &format!("{}{}", kv_with(""), second("other", 512)),
        "space[1] \"other\": id 512 is already used by space[0]",
    );
    assert_invalid(
        &format!("{}{}", kv_with(""), second("kv", 513)),
        "space[1] \"kv\": name is already used by space[0]",
    );
    assert_invalid(
        &second("low", 511),
        "space[0] \"low\": id 511 is outside 512..=2147483647 (ids below 512 belong to system \
         spaces)",
    );
    assert_invalid(
        &second("_space", 600),
        "space[0] \"_space\": names starting with \"_\" are reserved for system spaces",
    );
    assert_invalid(
        &second("", 600),
        "space[0] \"\": a space name must not be empty",
    );
    assert_invalid(
        "[[space]]\nname = \"bare\"\nid = 600\nformat = [{ name = \"id\", type = \"unsigned\" }]",
        "space[0] \"bare\": a space needs at least one index (the first is the primary index)",
    );
    assert_invalid(
        "[[space]]\nname = \"s\"\nid = 600\nshard = \"one\"",
        "space[0] \"s\": shard \"one\" is not one of \"all\", \"single\"",
    );
}

#[test]
fn formats_are_checked() {
    let space = |format: &str| {
        format!(
            "[[space]]\nname = \"s\"\nid = 600\nformat = {format}\n[[space.index]]\nname = \
             \"primary\"\nparts = [1]\n"
        )
    };
    assert_invalid(
        &space("[{ name = \"id\", type = \"unsigned\" }, { name = \"id\", type = \"string\" }]"),
        "space[0] \"s\": format[1] \"id\": field name is already used by format[0]",
    );
    assert_invalid(
        &space("[{ name = \"\", type = \"unsigned\" }]"),
        "space[0] \"s\": format[0] \"\": a field name must not be empty",
    );
    assert_invalid(
        &space("[{ name = \"id\", type = \"interval\" }]"),
        "space[0] \"s\": format[0] \"id\": type \"interval\" is not one of unsigned, integer, \
         number, double, string, boolean, varbinary, scalar, uuid, decimal, datetime, array, \
         map, any (or the aliases str, num, uint, int, bool)",
    );
}

#[test]
fn indexes_are_checked() {
    let secondary = |body: &str| kv_with(&format!("[[space.index]]\n{body}"));
    assert_invalid(
        &secondary("name = \"primary\"\nunique = false\nparts = [\"value\"]"),
        "space[0] \"kv\": index \"primary\": index name is already used by index[0] of this space",
    );
    assert_invalid(
        &secondary("name = \"\"\nunique = false\nparts = [\"value\"]"),
        "space[0] \"kv\": index[1]: an index name must not be empty",
    );
    assert_invalid(
        &secondary("name = \"v\"\ntype = \"BITSET\"\nparts = [\"value\"]"),
        "space[0] \"kv\": index \"v\": type \"BITSET\" is not one of TREE, HASH",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = []"),
        "space[0] \"kv\": index \"v\": parts must name at least one field",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = [\"zz\"]"),
        "space[0] \"kv\": index \"v\": part \"zz\" is not a field of the space format",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = [5]"),
        "space[0] \"kv\": index \"v\": part 5 is not a field of the space format (field \
         numbers are 1-based and the format has 4 fields)",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = [0]"),
        "space[0] \"kv\": index \"v\": part 0 is not a field of the space format (field \
         numbers are 1-based and the format has 4 fields)",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = [\"value\", 2]"),
        "space[0] \"kv\": index \"v\": part 2: the field appears twice in the parts of this index",
    );
    assert_invalid(
        &secondary("name = \"v\"\ntype = \"hash\"\nunique = false\nparts = [\"value\"]"),
        "space[0] \"kv\": index \"v\": a HASH index must be unique (use TREE for a non-unique \
         index)",
    );
    assert_invalid(
        &secondary("name = \"v\"\nunique = false\nparts = [\"blob\"]"),
        "space[0] \"kv\": index \"v\": part \"blob\": type map cannot be indexed (array, map and \
         any are not indexable)",
    );
    assert_invalid(
        &secondary(
            "name = \"v\"\nunique = false\nparts = [{ field = \"value\", type = \"uint\" }]",
        ),
        "space[0] \"kv\": index \"v\": part \"value\": type unsigned is incompatible with the \
         field's type string in the space format",
    );
    assert_invalid(
        &secondary(
            "name = \"v\"\nunique = false\nparts = [{ field = \"value\", is_nullable = true }]",
        ),
        "space[0] \"kv\": index \"v\": part \"value\": is_nullable = true in the part, but the \
         field is not nullable in the space format",
    );
    assert_invalid(
        &secondary(
            "name = \"v\"\nunique = false\nparts = [{ field = \"id\", collation = \"unicode\" }]",
        ),
        "space[0] \"kv\": index \"v\": part \"id\": collation unicode applies only to string and \
         scalar parts, not unsigned",
    );
    assert_invalid(
        &secondary(
            "name = \"v\"\nunique = false\nparts = [{ field = \"value\", collation = \"ru_RU\" }]",
        ),
        "space[0] \"kv\": index \"v\": part \"value\": collation \"ru_RU\" is not one of none, \
         binary, unicode, unicode_ci",
    );
    assert_invalid(
        &secondary("name = \"v\"\ntype = \"HASH\"\nparts = [{ field = \"note\" }]"),
        "space[0] \"kv\": index \"v\": part \"note\": a HASH index cannot have a nullable part",
    );
}

#[test]
fn unique_secondary_index_needs_a_single_shard_space() {
    let unique_on_value = "[[space.index]]\nname = \"by_value\"\nparts = [\"value\"]";
    assert_invalid(
        &kv_with(unique_on_value),
        "space[0] \"kv\": index \"by_value\": a unique secondary index needs shard = \"single\": \
         with shard = \"all\" rows are spread over shards by primary key and uniqueness across \
         shards is not offered; set unique = false or shard = \"single\"",
    );
    let single = kv_with(unique_on_value).replace("id = 512", "id = 512\nshard = \"single\"");
    let config = Config::from_toml_str(&single).unwrap();
    assert!(config.spaces[0].indexes[1].unique);
    assert_eq!(config.spaces[0].placement, Placement::Single);
}

#[test]
fn primary_index_is_unique_and_not_nullable() {
    let with_primary = |primary: &str| {
        format!(
            "[[space]]\nname = \"s\"\nid = 600\nformat = [{{ name = \"id\", type = \"unsigned\", \
             is_nullable = true }}, {{ name = \"k\", type = \"unsigned\" }}]\n[[space.index]]\n\
             name = \"primary\"\n{primary}\n"
        )
    };
    assert_invalid(
        &with_primary("unique = false\nparts = [\"k\"]"),
        "space[0] \"s\": index \"primary\": the first index is the primary index and must be \
         unique",
    );
    assert_invalid(
        &with_primary("parts = [\"k\", \"id\"]"),
        "space[0] \"s\": index \"primary\": the first index is the primary index and must not be \
         nullable, but field \"id\" is nullable",
    );
}

#[test]
fn the_example_error_from_the_issue_reads_as_promised() {
    let text = SHIPPED_CONFIG_TOML.replace(
        "parts = [\"a\", \"b\", \"c\", \"d\", \"name\"]",
        "parts = [\"a\", \"zz\"]",
    );
    assert_invalid(
        &text,
        "space[1] \"customers\": index \"composite\": part \"zz\" is not a field of the space \
         format",
    );
}

fn working_dir() -> PathBuf {
    std::env::current_dir().unwrap()
}

#[test]
fn relative_paths_are_resolved_against_the_working_directory() {
    let config = Config::from_toml_str("data_dir = \"./here/../there\"").unwrap();
    // Lexically: `.` goes, `..` stays (it may cross a symbolic link).
    assert_eq!(config.data_dir, working_dir().join("here/../there"));
    let config = Config::from_toml_str("data_dir = \"/srv/tarn\"").unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/srv/tarn"));

    // A relative --config is named by its absolute path, as is the default one.
    let relative = PathBuf::from("target/config-relative-test.toml");
    std::fs::write(&relative, "data_dir = \"d\"\n").unwrap();
    let args = CliArgs {
        config: Some(relative.clone()),
        ..CliArgs::default()
    };
    let loaded = load(&args);
    std::fs::remove_file(&relative).unwrap();
    let loaded = loaded.unwrap();
    assert_eq!(
        loaded.source,
        ConfigSource::File(working_dir().join(&relative))
    );
    assert_eq!(loaded.data_dir, working_dir().join("d"));

    let missing = CliArgs {
        config: Some(PathBuf::from("target/no-such-config.toml")),
        ..CliArgs::default()
    };
    match load(&missing) {
        Err(ConfigError::Read { path, .. }) => {
            assert_eq!(path, working_dir().join("target/no-such-config.toml"))
        }
        other => panic!("expected Read error, got {other:?}"),
    }
}

fn write_config(text: &str) -> (tempfile::TempDir, PathBuf) {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("tarn.toml");
    std::fs::write(&path, text).unwrap();
    (directory, path)
}

#[test]
fn flags_override_the_file() {
    let (_directory, path) = write_config(
        "listen = \"127.0.0.1:1\"\nshards = 2\ndata_dir = \"file\"\nlog_level = \"warn\"\n\
         wal_mode = \"write\"\nmemory = \"64MiB\"\nidle_poll_us = 0\nsched_slice_us = 0\n",
    );
    let path_text = path.to_str().unwrap();

    let file_only =
        load(&CliArgs::try_parse_from(["tarn", "--config", path_text]).unwrap()).unwrap();
    assert_eq!(file_only.listen, "127.0.0.1:1".parse().unwrap());
    assert_eq!(file_only.shard_count, 2);
    assert_eq!(file_only.source, ConfigSource::File(path.clone()));
    assert_eq!(file_only.data_dir, working_dir().join("file"));
    assert_eq!(file_only.log_level, LogLevel::Warn);
    assert_eq!(file_only.durability.wal_mode, WalMode::Write);
    assert_eq!(file_only.memory_bytes, 64 << 20);
    assert_eq!(file_only.idle_poll, std::time::Duration::ZERO);
    assert_eq!(file_only.sched_slice, None);
    assert!(!file_only.durability.force_recovery);

    let args = CliArgs::try_parse_from([
        "tarn",
        "--config",
        path_text,
        "--listen",
        "0.0.0.0:3302",
        "--shards",
        "4",
        "--data-dir",
        "flag",
        "--log-level",
        "debug",
        "--wal-mode",
        "fsync",
        "--memory",
        "2GiB",
        "--idle-poll-us",
        "200",
        "--sched-slice-us",
        "2000",
        "--force-recovery",
    ])
    .unwrap();
    let overridden = load(&args).unwrap();
    assert_eq!(overridden.listen, "0.0.0.0:3302".parse().unwrap());
    assert_eq!(overridden.shard_count, 4);
    assert_eq!(overridden.data_dir, working_dir().join("flag"));
    assert_eq!(overridden.log_level, LogLevel::Debug);
    assert_eq!(overridden.durability.wal_mode, WalMode::Fsync);
    assert_eq!(overridden.memory_bytes, 2 << 30);
    assert_eq!(overridden.idle_poll, std::time::Duration::from_micros(200));
    assert_eq!(
        overridden.sched_slice,
        Some(std::time::Duration::from_micros(2000))
    );
    assert!(overridden.durability.force_recovery);
}

#[test]
fn flags_are_checked_like_the_file() {
    let (_directory, path) = write_config("");
    let path_text = path.to_str().unwrap();
    let args =
        CliArgs::try_parse_from(["tarn", "--config", path_text, "--memory", "1KiB"]).unwrap();
    assert_eq!(
        load(&args).unwrap_err().to_string(),
        "memory: 1024 bytes is too small; it must be at least 16MiB"
    );
    let args =
        CliArgs::try_parse_from(["tarn", "--config", path_text, "--shards", "2000"]).unwrap();
    assert_eq!(
        load(&args).unwrap_err().to_string(),
        "shards: 2000 is outside 0..=1024 (0 means one per core)"
    );
    assert!(CliArgs::try_parse_from(["tarn", "--memory", "2GB"]).is_err());
    assert!(CliArgs::try_parse_from(["tarn", "--wal-mode", "sometimes"]).is_err());
    assert!(CliArgs::try_parse_from(["tarn", "--listen", "localhost"]).is_err());
    assert!(CliArgs::try_parse_from(["tarn", "--bogus"]).is_err());
}

#[test]
fn no_flags_mean_default_path() {
    let args = CliArgs::try_parse_from(["tarn"]).unwrap();
    assert_eq!(args, CliArgs::default());
    assert_eq!(
        args.config_path(),
        std::path::Path::new(DEFAULT_CONFIG_PATH)
    );
}

#[test]
fn default_path_falls_back_to_the_shipped_file() {
    // Whether or not conf/tarn.toml exists in the test's working directory (the crate root),
    // the default load yields the shipped configuration.
    let config = load(&CliArgs::default()).unwrap();
    let default_file = ConfigSource::File(working_dir().join(DEFAULT_CONFIG_PATH));
    assert!(
        config.source == default_file || config.source == ConfigSource::BuiltIn,
        "{:?}",
        config.source
    );
    let shipped = Config::from_toml_str(SHIPPED_CONFIG_TOML).unwrap();
    assert_eq!(
        config,
        Config {
            source: config.source.clone(),
            ..shipped
        }
    );
    let (text, _) = read_config_text(None).unwrap();
    assert_eq!(text, SHIPPED_CONFIG_TOML);
}

#[test]
fn a_missing_default_file_uses_the_built_in_copy() {
    let directory = tempfile::tempdir().unwrap();
    let missing_default = directory.path().join("conf/tarn.toml");
    let (text, source) = read_config_text_or(None, &missing_default).unwrap();
    assert_eq!(text, SHIPPED_CONFIG_TOML);
    assert_eq!(source, ConfigSource::BuiltIn);
    assert_eq!(source.to_string(), "built-in conf/tarn.toml");
    let explicit = read_config_text_or(Some(&missing_default), &missing_default);
    assert!(matches!(explicit, Err(ConfigError::Read { .. })));
}

#[test]
fn an_explicit_missing_file_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    let missing = directory.path().join("missing.toml");
    let args = CliArgs {
        config: Some(missing.clone()),
        ..CliArgs::default()
    };
    match load(&args) {
        Err(ConfigError::Read { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Read error, got {other:?}"),
    }
}

#[test]
fn syntax_errors_name_the_origin() {
    let (_directory, path) = write_config("listen = ");
    let args = CliArgs {
        config: Some(path.clone()),
        ..CliArgs::default()
    };
    let message = load(&args).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("config {}: ", path.display())),
        "{message}"
    );
}

#[test]
fn help_documents_every_flag() {
    use clap::CommandFactory;
    let help = CliArgs::command().render_long_help().to_string();
    for flag in [
        "--config <PATH>",
        "--listen <ADDR>",
        "--shards <N>",
        "--data-dir <DIR>",
        "--log-level <LEVEL>",
        "--wal-mode <MODE>",
        "--memory <SIZE>",
        "--idle-poll-us <US>",
        "--sched-slice-us <US>",
        "--metrics-listen <ADDR>",
        "--force-recovery",
    ] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
    }
    CliArgs::command().debug_assert();
}

/// `_index` shows the type as the config spells it, `tree` when omitted (Tarantool's
/// `create_index` default), while the kind is parsed whatever the case.
#[test]
fn index_type_keeps_its_spelling() {
    let config = Config::from_toml_str(
        r#"
[[space]]
name = "t"
id = 700
shard = "single"
format = [{ name = "id", type = "unsigned" }, { name = "x", type = "unsigned" }]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_x"
type = "Hash"
parts = ["x"]
"#,
    )
    .expect("valid");
    let indexes = &config.spaces[0].indexes;
    assert_eq!(indexes[0].type_name, "tree");
    assert_eq!(indexes[0].index_type, IndexType::Tree);
    assert_eq!(indexes[1].type_name, "Hash");
    assert_eq!(indexes[1].index_type, IndexType::Hash);
}

#[test]
fn metrics_are_off_unless_metrics_listen_is_set_and_the_alias_defaults_to_listen() {
    let shipped = Config::from_toml_str(SHIPPED_CONFIG_TOML).unwrap();
    assert_eq!(shipped.metrics.listen, None);
    assert_eq!(shipped.metrics.alias, "127.0.0.1:3301");
    let empty = Config::from_toml_str("metrics_listen = \"\"").unwrap();
    assert_eq!(empty.metrics.listen, None);
    let on = Config::from_toml_str(
        "listen = \"127.0.0.1:3302\"\nmetrics_listen = \"127.0.0.1:9100\"\nmetrics_alias = \"a\"",
    )
    .unwrap();
    assert_eq!(on.metrics.listen, Some("127.0.0.1:9100".parse().unwrap()));
    assert_eq!(on.metrics.alias, "a");
    let error = Config::from_toml_str("metrics_listen = \"localhost:9100\"").unwrap_err();
    assert!(error.to_string().starts_with("metrics_listen: "), "{error}");
    let args = CliArgs::try_parse_from(["tarn", "--metrics-listen", "127.0.0.1:0"]).unwrap();
    assert_eq!(args.metrics_listen, Some("127.0.0.1:0".parse().unwrap()));
}
