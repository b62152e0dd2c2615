//! crud CALLs: a function (one of crud's or of `box.space`'s, now and then another name) and its arguments,
//! generated in crud's shapes (space names, tuples, objects, lists of them, update
//! operations, select conditions, option maps with crud's option names and values of any
//! type) or raw. Checked:
//! * the call framed as a CALL packet: the one-pass crud decoder (`protocol::crud_call`) gives what
//!   the general decoder gives, or, where only it accepts, arguments that are torn;
//! * `crud::plan` (which tries `fast_plan` first) plans exactly as `plan_general`, and a
//!   call the one-pass planner takes is planned the same by the general one;
//! * the call run on a shard holding a few rows (`crud::plan_and_run`) never panics and
//!   leaves only tuples valid for their space, in every index alike.

use super::check::check_space;
use super::gen::{self, Bytes};
use tarn::crud::{self, fast_plan, CrudConfig, Func};
use tarn::msgpack::{write_array_len, write_map_len, write_str, write_uint};
use tarn::protocol::crud_call as fast_call;
use tarn::protocol::decode_packet_general;
use tarn::storage::{
    Engine, FieldDef, FieldType, IndexDef, KeyDef, KeyPart, SpaceDef, SpaceFormat,
};

fn tree(id: u32, name: &str, unique: bool, parts: Vec<KeyPart>) -> IndexDef {
    IndexDef::tree(id, name, unique, parts)
}

/// `customers` and `pages`, as crud's unit tests have them, with a few rows each.
pub fn engine() -> Engine {
    use FieldType::*;
    let mut engine = Engine::new(1 << 24);
    engine
        .create_space(SpaceDef {
            id: 512,
            name: "customers".into(),
            format: SpaceFormat::new(vec![
                FieldDef::new("id", Unsigned),
                FieldDef::new("bucket_id", Unsigned),
                FieldDef::new("name", String),
                FieldDef::new("age", Number).nullable(),
            ]),
            indexes: vec![
                tree(0, "primary", true, vec![KeyPart::new(0, Unsigned)]),
                tree(1, "bucket_id", false, vec![KeyPart::new(1, Unsigned)]),
                IndexDef {
                    key_def: KeyDef::new([KeyPart::new(3, Number).nullable()]),
                    ..tree(2, "age", false, vec![KeyPart::new(3, Number)])
                },
            ],
            is_sync: false,
        })
        .expect("a valid space");
    engine
        .create_space(SpaceDef {
            id: 513,
            name: "pages".into(),
            format: SpaceFormat::new(vec![
                FieldDef::new("id", Unsigned),
                FieldDef::new("bucket_id", Unsigned),
                FieldDef::new("group", Unsigned),
            ]),
            indexes: vec![
                tree(0, "primary", true, vec![KeyPart::new(0, Unsigned)]),
                tree(1, "group", false, vec![KeyPart::new(2, Unsigned)]),
            ],
            is_sync: false,
        })
        .expect("a valid space");
    let customers = engine.space_mut(512).expect("just made");
    for (id, name, age) in [(1u8, "Elizabeth", 12u8), (2, "Mary", 46), (3, "David", 33)] {
        let mut tuple = vec![0x94, id, 0x01];
        write_str(&mut tuple, name.as_bytes());
        tuple.push(age);
        customers.insert(&tuple).expect("a valid tuple");
    }
    let pages = engine.space_mut(513).expect("just made");
    for id in 1..=6u8 {
        pages
            .insert(&[0x93, id, 0x02, id % 3])
            .expect("a valid tuple");
    }
    engine
}

const SPACES: [&str; 3] = ["customers", "pages", "nope"];
const FIELDS: [&str; 7] = ["id", "bucket_id", "name", "age", "group", "x", "primary"];
const OPTIONS: [&str; 21] = [
    "timeout",
    "bucket_id",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
    "skip_nullability_check_on_flatten",
    "stop_on_error",
    "rollback_on_error",
    "mode",
    "prefer_replica",
    "first",
    "after",
    "batch_size",
    "force_map_call",
    "fullscan",
    "vshard_router",
    "yield_every",
    "bogus",
    "iterator",
    "offset",
    "limit",
];
const BOX_SPACE_METHODS: [&str; 15] = [
    "len", "count", "bsize", "get", "select", "min", "max", "random", "insert", "replace", "put",
    "update", "upsert", "delete", "truncate",
];
const CONDITION_OPS: [&str; 7] = ["=", "==", "<", "<=", ">", ">=", "!="];

/// One argument in a shape crud reads.
fn argument(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    match bytes.byte() % 12 {
        0 | 1 => write_str(out, SPACES[bytes.below(SPACES.len())].as_bytes()),
        2 => gen::tuple(bytes, out),
        3 => {
            // A tuple of crud's shape: id, nil bucket_id, a name, an age.
            out.push(0x94);
            write_uint(out, u64::from(bytes.byte() % 8));
            out.push(if bytes.bool() {
                0xc0
            } else {
                bytes.byte() & 0x7f
            });
            gen::value(bytes, out, 2);
            gen::value(bytes, out, 2);
        }
        4 => object(bytes, out),
        5 => {
            let count = bytes.below(4);
            write_array_len(out, count as u32);
            for _ in 0..count {
                if bytes.bool() {
                    object(bytes, out);
                } else {
                    gen::tuple(bytes, out);
                }
            }
        }
        6 => gen::update_ops(bytes, out),
        7 => {
            // Select conditions: [[op, field or index, value], ...].
            let count = bytes.below(3);
            write_array_len(out, count as u32);
            for _ in 0..count {
                out.push(0x93);
                write_str(
                    out,
                    CONDITION_OPS[bytes.below(CONDITION_OPS.len())].as_bytes(),
                );
                write_str(out, FIELDS[bytes.below(FIELDS.len())].as_bytes());
                gen::value(bytes, out, 2);
            }
        }
        8 | 9 => {
            let count = bytes.below(4);
            write_map_len(out, count as u32);
            for _ in 0..count {
                write_str(out, OPTIONS[bytes.below(OPTIONS.len())].as_bytes());
                match bytes.byte() % 4 {
                    0 => out.push(0xc3),
                    1 => write_uint(out, u64::from(bytes.byte())),
                    2 => {
                        out.push(0x92);
                        write_str(out, FIELDS[bytes.below(FIELDS.len())].as_bytes());
                        write_str(out, FIELDS[bytes.below(FIELDS.len())].as_bytes());
                    }
                    _ => gen::value(bytes, out, 2),
                }
            }
        }
        10 => gen::key(bytes, out),
        _ => gen::value(bytes, out, 1),
    }
}

/// `{field: value, ...}` with crud's field names.
fn object(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    let count = bytes.below(5);
    write_map_len(out, count as u32);
    for _ in 0..count {
        write_str(out, FIELDS[bytes.below(FIELDS.len())].as_bytes());
        gen::value(bytes, out, 2);
    }
}

/// The function name and arguments the input describes.
pub fn call(bytes: &mut Bytes<'_>) -> (String, Vec<u8>) {
    let choice = bytes.byte();
    let name = match choice {
        0 => String::from_utf8_lossy(bytes.raw()).into_owned(),
        // `box.space`'s read methods, planned beside crud's.
        1..=8 => {
            let space = SPACES[bytes.below(SPACES.len())];
            let method = BOX_SPACE_METHODS[bytes.below(BOX_SPACE_METHODS.len())];
            match bytes.byte() % 2 {
                0 => format!("box.space.{space}:{method}"),
                _ => {
                    let index = FIELDS[bytes.below(FIELDS.len())];
                    format!("box.space.{space}.index.{index}:{method}")
                }
            }
        }
        // DDL, planned against the same schema (`crud::box_schema`).
        9..=14 => {
            let space = SPACES[bytes.below(SPACES.len())];
            let index = FIELDS[bytes.below(FIELDS.len())];
            match bytes.byte() % 6 {
                0 => "box.schema.space.create".to_string(),
                1 => {
                    let method = ["drop", "alter"][usize::from(bytes.byte() % 2)];
                    format!("box.space.{space}.index.{index}:{method}")
                }
                method => {
                    let method =
                        ["create_index", "drop", "rename", "format"][usize::from(method) - 2];
                    format!("box.space.{space}:{method}")
                }
            }
        }
        _ => Func::ALL[usize::from(choice) % Func::ALL.len()]
            .name()
            .to_string(),
    };
    let mut args = Vec::new();
    match bytes.byte() % 16 {
        0 => args.extend_from_slice(bytes.raw()),
        damage => {
            let count = bytes.below(6);
            write_array_len(&mut args, count as u32);
            for _ in 0..count {
                argument(bytes, &mut args);
            }
            // Torn, or followed by a byte, as the one-pass decoder may leave them.
            match damage {
                1 => {
                    let keep = bytes.below(args.len() + 1);
                    args.truncate(keep);
                }
                2 => args.push(bytes.byte()),
                _ => {}
            }
        }
    }
    (name, args)
}

/// The call as the CALL packet a connector sends (header and body, no size prefix).
fn packet(name: &str, args: &[u8], sync: u8) -> Vec<u8> {
    let mut packet = vec![0x82, 0x00, 0x0a, 0x01, sync & 0x7f, 0x82, 0x22];
    write_str(&mut packet, name.as_bytes());
    packet.push(0x21);
    packet.extend_from_slice(args);
    packet
}

pub fn run(data: &[u8]) {
    let mut bytes = Bytes::new(data);
    let (name, args) = call(&mut bytes);
    let packet = packet(&name, &args, bytes.byte());
    let general = decode_packet_general(&packet);
    match (&general, fast_call::decode_packet(&packet)) {
        (Err(refused), Ok((header, call))) => {
            assert_eq!(header.sync, refused.sync, "{packet:02x?}");
            let tarn::protocol::request::Request::Call(call) = call else {
                panic!("the crud decoder took a packet that is no call: {packet:02x?}");
            };
            assert!(fast_call::is_torn(call.args), "{packet:02x?}");
            assert_eq!(refused.error, fast_call::torn_args_error(), "{packet:02x?}");
        }
        (_, fast) => assert_eq!(fast, general, "{packet:02x?}"),
    }
    let engine = engine();
    if crud::box_schema::is_schema_function(&name) {
        return change_schema(engine, &name, &args);
    }
    let config = CrudConfig::for_instance(3000, "aaaaaaaa-0000-4000-8000-000000000001");
    let planned = crud::plan(&engine, &config, &name, &args);
    let general = crud::plan_general(&engine, &config, &name, &args);
    assert_eq!(planned, general, "{name} {args:02x?}");
    if let Some(func) = Func::from_name(&name) {
        if let Some(point) = fast_plan::plan_point(&engine, &config, func, &args) {
            assert_eq!(Ok(crud::Plan::Point(point)), general, "{name} {args:02x?}");
        }
    }
    // Run as a shard without a WAL runs it: nothing to wait for.
    let mut shard = tarn::shard::Shard::new(0, engine, None);
    let mut out = Vec::new();
    let _ran = crud::plan_and_run(&mut shard, &config, 1, 1, &name, &args, &mut out);
    for space in shard.engine.spaces() {
        check_space(space);
    }
}

/// A DDL call planned and made on a shard without a WAL: a change whose check passes is
/// made (a switch that failed after the check would poison a running server's shards), and
/// leaves only valid tuples in consistent indexes.
fn change_schema(engine: Engine, name: &str, args: &[u8]) {
    use tarn::crud::box_schema::{plan, SchemaPlan};
    use tarn::shard::DefinitionChange;
    let catalog = tarn::placement::Catalog::new(
        2,
        engine.spaces().iter().map(|space| {
            let primary = space.indexes()[0].def.key_def.clone();
            (space.id, tarn::config::Placement::All, Some(primary))
        }),
    );
    let Ok(SchemaPlan::Change { change, .. }) = plan(&engine, &catalog, name, args) else {
        return;
    };
    let checked = match &change {
        DefinitionChange::Redefine(def) => engine.check_redefinition(def).is_ok(),
        DefinitionChange::Create(_) | DefinitionChange::Drop(_) => true,
    };
    let mut engine = engine;
    if let DefinitionChange::Redefine(def) = &change {
        // Prepared while serving, where it can be: the walk agrees with the check, and a
        // walk that finished leaves the switch to the prepared definition.
        match engine.prepare_redefinition(def) {
            Ok(true) => {
                let walked = loop {
                    match engine.redefinition_step(def.id, 3) {
                        Ok(false) => continue,
                        done => break done.is_ok(),
                    }
                };
                assert_eq!(walked, checked, "{name} {args:02x?}: walk vs check");
                if !walked {
                    engine.cancel_redefinition(def.id);
                }
            }
            Ok(false) => {}
            Err(error) => assert!(!checked, "{name}: checked, then prepare refused {error}"),
        }
    }
    let mut shard = tarn::shard::Shard::new(0, engine, None);
    let made = shard.change_schema(change.clone(), &[0; 8]);
    let refused = made.err();
    assert!(
        !checked || refused.is_none(),
        "{name} {args:02x?}: checked, then {refused:?}"
    );
    for space in shard.engine.spaces() {
        check_space(space);
    }
}
