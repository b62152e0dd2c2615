//! crud on one engine, with exact replies. Arguments are written as JSON and turned into
//! msgpack (integers as uint/int, numbers with a point as doubles); replies are compared
//! in Tarantool's text form of msgpack (`storage::text`).

use super::*;
use crate::protocol::crud_call as fast_call;
use crate::protocol::ErrorCode;
use crate::storage::text::msgpack_to_text;
use crate::storage::Engine;
use crate::storage::{
    FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef, SpaceFormat,
};

/// Runs a whole crud call on one engine: plan, run, finish. The single-shard case of the
/// three steps, and what the unit tests drive.
fn execute_on_engine(
    engine: &mut Engine,
    config: &CrudConfig,
    function_name: &str,
    args: &[u8],
) -> CrudReply {
    let plan = match plan(engine, config, function_name, args) {
        Ok(plan) => plan,
        Err(raised) => return CrudReply::Raised(raised),
    };
    CrudReply::Values(run_on_engine(engine, config, plan))
}

fn run_on_engine(engine: &mut Engine, config: &CrudConfig, plan: Plan<'_>) -> Vec<u8> {
    match plan {
        Plan::Reply(values) => values,
        Plan::Point(point) => {
            let outcome = engine
                .space_mut(point.space_id)
                .and_then(|space| write::apply(space, &point.op))
                .map(|applied| applied.row);
            let space = engine.space(point.space_id).expect("planned on this space");
            finish_point(config, space, &point, outcome)
        }
        Plan::Many(many) => {
            let items = write::apply_batch(
                engine,
                many.space_id,
                &many.ops,
                many.stop_on_error,
                many.rollback_on_error,
            );
            let space = engine.space(many.space_id).expect("planned on this space");
            finish_many(space, config, &many, &items)
        }
        Plan::Select(planned) => {
            let rows = select::scan_shard(engine, &planned.plan);
            let space = engine
                .space(planned.plan.space_id)
                .expect("planned on this space");
            finish_select(space, &planned, vec![rows])
        }
        Plan::Border { plan, columns } => {
            let rows = select::scan_shard(engine, &plan);
            let space = engine.space(plan.space_id).expect("planned on this space");
            let func = if plan.iterator == crate::storage::IteratorType::Le {
                Func::Max
            } else {
                Func::Min
            };
            finish_border(space, func, &plan, &columns, vec![rows])
        }
        Plan::Count(plan) => finish_count(config, [select::count_shard(engine, &plan)]),
        Plan::Len { space_id } => {
            finish_len(engine.space(space_id).map_or(0, |space| space.len() as u64))
        }
        Plan::Truncate { space_id, .. } => {
            if let Ok(space) = engine.space_mut(space_id) {
                space.truncate();
            }
            finish_truncate()
        }
        Plan::Sum(sum) => finish_len(sum.count(engine).expect("planned on this engine")),
        Plan::BoxSelect(select) => panic!("a select, not a crud call: {select:?}"),
        Plan::BoxWrite(write) => panic!("a write, not a crud call: {write:?}"),
    }
}

/// JSON text to msgpack, for arguments.
pub(super) fn json(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    parse_json(&mut rest, &mut out);
    assert!(rest.trim().is_empty(), "trailing JSON: {rest}");
    out
}

fn parse_json(rest: &mut &str, out: &mut Vec<u8>) {
    use crate::msgpack::{write_array_len, write_f64, write_int, write_str};
    *rest = rest.trim_start();
    let first = rest.chars().next().expect("JSON value");
    match first {
        '[' | '{' => {
            let close = if first == '[' { ']' } else { '}' };
            *rest = rest[1..].trim_start();
            let mut items = Vec::new();
            let mut count = 0u32;
            while !rest.starts_with(close) {
                parse_json(rest, &mut items);
                if first == '{' {
                    *rest = rest.trim_start().strip_prefix(':').expect("':' in object");
                    parse_json(rest, &mut items);
                }
                count += 1;
                *rest = rest.trim_start();
                if let Some(after) = rest.strip_prefix(',') {
                    *rest = after.trim_start();
                }
            }
            *rest = &rest[1..];
            if first == '[' {
                write_array_len(out, count);
            } else {
                mp::write_map_len(out, count);
            }
            out.extend_from_slice(&items);
        }
        '"' => {
            let end = rest[1..].find('"').expect("closing quote") + 1;
            write_str(out, &rest.as_bytes()[1..end]);
            *rest = &rest[end + 1..];
        }
        _ => {
            let end = rest
                .find(|c: char| c == ',' || c == ']' || c == '}' || c.is_whitespace())
                .unwrap_or(rest.len());
            let token = &rest[..end];
            *rest = &rest[end..];
            match token {
                "null" => out.push(0xc0),
                "true" => out.push(0xc3),
                "false" => out.push(0xc2),
                _ if token.contains('.') || token.contains('e') => {
                    write_f64(out, token.parse().expect("number"))
                }
                _ => write_int(out, token.parse().expect("integer")),
            }
        }
    }
}

fn config() -> CrudConfig {
    CrudConfig::for_instance(3000, "aaaaaaaa-0000-4000-8000-000000000001")
}

const UUID: &str = "aaaaaaaa-0000-4000-8000-000000000001";

fn tree(id: u32, name: &str, unique: bool, parts: &[(u32, FieldType)]) -> IndexDef {
    IndexDef {
        id,
        name: name.into(),
        kind: IndexKind::Tree,
        unique,
        key_def: KeyDef::new(parts.iter().map(|&(no, ty)| KeyPart::new(no, ty))),
    }
}

/// `customers` as in spec §18.2 (plus an `age` index), and `pages` for pagination.
fn engine() -> Engine {
    let mut engine = Engine::new(1 << 30);
    engine
        .create_space(SpaceDef {
            id: 512,
            name: "customers".into(),
            format: SpaceFormat::new(vec![
                FieldDef::new("id", FieldType::Unsigned),
                FieldDef::new("bucket_id", FieldType::Unsigned),
                FieldDef::new("name", FieldType::String),
                FieldDef::new("age", FieldType::Number).nullable(),
            ]),
            indexes: vec![
                tree(0, "primary", true, &[(0, FieldType::Unsigned)]),
                tree(1, "bucket_id", false, &[(1, FieldType::Unsigned)]),
                IndexDef {
                    key_def: KeyDef::new([KeyPart::new(3, FieldType::Number).nullable()]),
                    ..tree(2, "age", false, &[])
                },
            ],
            is_sync: false,
        })
        .unwrap();
    engine
        .create_space(SpaceDef {
            id: 513,
            name: "pages".into(),
            format: SpaceFormat::new(vec![
                FieldDef::new("id", FieldType::Unsigned),
                FieldDef::new("bucket_id", FieldType::Unsigned),
                FieldDef::new("group", FieldType::Unsigned),
            ]),
            indexes: vec![
                tree(0, "primary", true, &[(0, FieldType::Unsigned)]),
                tree(1, "group", false, &[(2, FieldType::Unsigned)]),
            ],
            is_sync: false,
        })
        .unwrap();
    engine
}

/// `values` with every error object cut to `class_name`, `err`, `str` and
/// `operation_data`, in that order, and the texts cut before a wrapped error's stack:
/// where crud creates each error (`file`, `line`, `stack`) is asserted against the real
/// crud by `tests/crud_errors.rs`.
fn without_sites(values: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(text) = mp::as_str(values).filter(|text| text.contains("\nstack traceback:")) {
        let cut = &text[..text.find("\nstack traceback:").unwrap_or(text.len())];
        crate::msgpack::write_str(&mut out, cut.as_bytes());
    } else if let Some(pairs) = mp::map_items(values) {
        let is_error = pairs
            .iter()
            .any(|(key, _)| mp::as_str(key) == Some("class_name"));
        let kept: Vec<_> = match is_error {
            true => ["class_name", "err", "str", "operation_data"]
                .iter()
                .filter_map(|name| pairs.iter().find(|(key, _)| mp::as_str(key) == Some(name)))
                .copied()
                .collect(),
            false => pairs,
        };
        mp::write_map_len(&mut out, kept.len() as u32);
        for (key, value) in kept {
            out.extend_from_slice(key);
            out.extend_from_slice(&without_sites(value));
        }
    } else if let Some(items) = mp::array_items(values) {
        crate::msgpack::write_array_len(&mut out, items.len() as u32);
        for item in items {
            out.extend_from_slice(&without_sites(item));
        }
    } else {
        out.extend_from_slice(values);
    }
    out
}

/// Runs a call and returns its values as text (error objects [`without_sites`]), or
/// panics on a raised error.
fn call(engine: &mut Engine, function: &str, args: &str) -> String {
    match execute_on_engine(engine, &config(), function, &json(args)) {
        CrudReply::Values(values) => msgpack_to_text(&without_sites(&values)),
        CrudReply::Raised(raised) => panic!("raised {raised:?}"),
    }
}

fn raised(engine: &mut Engine, function: &str, args: &str) -> Raised {
    match execute_on_engine(engine, &config(), function, &json(args)) {
        CrudReply::Raised(raised) => raised,
        CrudReply::Values(values) => panic!("returned {}", msgpack_to_text(&values)),
    }
}

const META: &str = r#"[{"name": "id", "type": "unsigned"}, {"name": "bucket_id", "type": "unsigned"}, {"name": "name", "type": "string"}, {"name": "age", "type": "number", "is_nullable": true}]"#;

fn ok(rows: &str) -> String {
    format!(r#"[{{"metadata": {META}, "rows": {rows}}}, null]"#)
}

fn err(class: &str, text: &str) -> String {
    let text = text.replace('"', "\\\"");
    format!(r#"[null, {{"class_name": "{class}", "err": "{text}", "str": "{class}: {text}"}}]"#)
}

/// Fills `customers` with the rows of spec §18.5's examples.
fn customers(engine: &mut Engine) {
    for (id, name, age) in [
        (1, "Elizabeth", 12),
        (2, "Mary", 46),
        (3, "David", 33),
        (4, "William", 81),
        (5, "Jack", 35),
        (6, "William", 25),
        (7, "Sarah", 20),
        (8, "Tom", 20),
        (9, "Alice", 18),
    ] {
        call(
            engine,
            "crud.insert",
            &format!(r#"["customers", [{id}, null, "{name}", {age}], {{}}]"#),
        );
    }
}

fn ids(reply: &str) -> Vec<u64> {
    // Rows are the arrays after `"rows": `; their first field is the id.
    let rows = &reply[reply.find("\"rows\": ").expect("rows") + 8..];
    let mut out = Vec::new();
    let mut depth = 0;
    let mut at_row_start = false;
    let mut number = String::new();
    for c in rows.chars() {
        match c {
            '[' => {
                depth += 1;
                at_row_start = depth == 2;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            c if at_row_start && c.is_ascii_digit() => number.push(c),
            _ if at_row_start && !number.is_empty() => {
                out.push(number.parse().unwrap());
                number.clear();
                at_row_start = false;
            }
            _ => {}
        }
    }
    out
}

#[test]
fn bucket_id_matches_crud_vectors() {
    assert_eq!(bucket::bucket_id_of(&[&[10]], 3000), 569);
    assert_eq!(bucket::bucket_id_of(&[&[14]], 3000), 56);
    assert_eq!(bucket::bucket_id_of(&[&[50]], 3000), 1965);
    // Tarantool's digest.crc32 is the standard CRC-32C without its final XOR.
    assert_eq!(bucket::tarantool_crc32(b"123456789"), !0xE306_9283);
}

/// bucket_id values computed outside tarn with crud's formula, `crc32(tostring(pk_1) ..
/// tostring(pk_2) ..) % 3000 + 1` (CRC-32C, register from 0xFFFFFFFF, no final XOR), for
/// the texts LuaJIT's `tostring` gives each key.
#[test]
fn bucket_id_is_pinned_for_keys_of_every_kind() {
    use crate::msgpack::{write_f64, write_int, write_str, write_uint};
    let uint = |value: u64| {
        let mut out = Vec::new();
        write_uint(&mut out, value);
        out
    };
    let int = |value: i64| {
        let mut out = Vec::new();
        write_int(&mut out, value);
        out
    };
    let text = |value: &str| {
        let mut out = Vec::new();
        write_str(&mut out, value.as_bytes());
        out
    };
    let float = |value: f64| {
        let mut out = Vec::new();
        write_f64(&mut out, value);
        out
    };
    let cases: Vec<(Vec<Vec<u8>>, u64)> = vec![
        (vec![uint(1)], 477),
        (vec![uint(42)], 541),
        (vec![uint(100_000)], 2074),
        (vec![uint(1 << 53)], 1278),
        // Past a double's exact range LuaJIT prints cdata: "9007199254740993ULL".
        (vec![uint((1 << 53) + 1)], 2497),
        (vec![uint(u64::MAX)], 301),
        (vec![int(-1)], 2959),
        (vec![int(-100)], 477),
        (vec![int(-(1 << 53) - 1)], 714),
        (vec![text("customer-42")], 1076),
        (vec![text("ключ")], 1074),
        (vec![text("")], 2296),
        (vec![float(1.5)], 193),
        (vec![vec![0xc3]], 1683),
        (vec![uint(1), text("a")], 1817),
        (vec![uint(42), int(-7)], 2366),
        (vec![uint(1), text("customer-42")], 1708),
    ];
    for (parts, expected) in &cases {
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        assert_eq!(
            bucket::bucket_id_of(&parts, 3000),
            *expected,
            "{parts:02x?}"
        );
    }

    // The same values through whole calls, on the one-pass planner and the general one.
    let mut engine = Engine::new(1 << 30);
    let space = |id: u32, name: &str, key: FieldType, parts: &[(u32, FieldType)]| SpaceDef {
        id,
        name: name.into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("k", key),
            FieldDef::new("bucket_id", FieldType::Unsigned),
            FieldDef::new("s", FieldType::String),
        ]),
        indexes: vec![tree(0, "primary", true, parts)],
        is_sync: false,
    };
    for def in [
        space(
            600,
            "by_uint",
            FieldType::Unsigned,
            &[(0, FieldType::Unsigned)],
        ),
        space(
            601,
            "by_int",
            FieldType::Integer,
            &[(0, FieldType::Integer)],
        ),
        space(602, "by_str", FieldType::String, &[(0, FieldType::String)]),
        space(
            603,
            "by_two",
            FieldType::Unsigned,
            &[(0, FieldType::Unsigned), (2, FieldType::String)],
        ),
    ] {
        engine.create_space(def).unwrap();
    }
    let config = config();
    for (function, args, stored) in [
        (
            "crud.insert",
            r#"["by_uint", [42, null, "x"]]"#,
            r#"[42, 541, "x"]"#,
        ),
        (
            "crud.replace",
            r#"["by_uint", [100000, null, "x"], {}]"#,
            r#"[100000, 2074, "x"]"#,
        ),
        (
            "crud.insert",
            r#"["by_int", [-1, null, "x"]]"#,
            r#"[-1, 2959, "x"]"#,
        ),
        (
            "crud.replace",
            r#"["by_int", [-100, null, "x"]]"#,
            r#"[-100, 477, "x"]"#,
        ),
        (
            "crud.insert",
            r#"["by_str", ["customer-42", null, "x"]]"#,
            r#"["customer-42", 1076, "x"]"#,
        ),
        (
            "crud.replace",
            r#"["by_two", [1, null, "a"]]"#,
            r#"[1, 1817, "a"]"#,
        ),
        (
            "crud.insert",
            r#"["by_two", [1, null, "customer-42"]]"#,
            r#"[1, 1708, "customer-42"]"#,
        ),
    ] {
        let args = json(args);
        let general = plan_general(&engine, &config, function, &args);
        assert_eq!(
            plan(&engine, &config, function, &args),
            general,
            "{function}"
        );
        match execute_on_engine(&mut engine, &config, function, &args) {
            CrudReply::Values(values) => assert!(
                msgpack_to_text(&values).contains(stored),
                "{function}: {}",
                msgpack_to_text(&values)
            ),
            CrudReply::Raised(raised) => panic!("raised {raised:?}"),
        }
    }
}

/// A tuple under a wider array header than it needs (array16 of three fields) is planned
/// with a fresh, shortest header on both planners (a proptest found the one-pass planner
/// keeping the wide one).
#[test]
fn wide_array_headers_are_rewritten_by_both_planners() {
    let engine = engine();
    let config = config();
    let tuple = [&[0xdc, 0x00, 0x03, 0x05, 0xc0, 0xa1][..], b"a"].concat();
    let name = [&[0xa9][..], b"customers"].concat();
    for (function, args) in [
        ("crud.insert", [&[0x92][..], &name, &tuple].concat()),
        (
            "crud.replace",
            [&[0x93][..], &name, &tuple, &[0x80]].concat(),
        ),
        (
            "crud.upsert",
            [&[0x93][..], &name, &tuple, &json(r#"[["+", 4, 1]]"#)].concat(),
        ),
    ] {
        let general = plan_general(&engine, &config, function, &args);
        assert_eq!(
            plan(&engine, &config, function, &args),
            general,
            "{function}"
        );
        let Ok(Plan::Point(point)) = general else {
            panic!("{function}: {general:?}")
        };
        let (PointOp::Insert { tuple }
        | PointOp::Replace { tuple }
        | PointOp::Upsert { tuple, .. }) = &point.op
        else {
            panic!("{function}: {point:?}")
        };
        let tuple = tuple.bytes();
        assert_eq!(msgpack_to_text(&tuple), r#"[5, 1172, "a"]"#, "{function}");
        assert_eq!(tuple[0], 0x93, "{function}");
    }
}

#[test]
fn insert_computes_bucket_id_and_returns_metadata_and_rows() {
    let mut engine = engine();
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [10, null, "Elizabeth", 12], {}]"#
        ),
        ok(r#"[[10, 569, "Elizabeth", 12]]"#)
    );
    // opts may be nil or absent; opts.bucket_id is written into the tuple.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [14, null, "Mary"]]"#
        ),
        ok(r#"[[14, 56, "Mary"]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [50, null, "Tom"], {"bucket_id": 7}]"#
        ),
        ok(r#"[[50, 7, "Tom"]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.insert", r#"["customers", [51, 3, "Tom"], {"bucket_id": 7}]"#),
        err("InsertError", "Failed to get bucket ID: BucketIDError: Tuple and opts.bucket_id contain different bucket_id values: 3 and 7")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [10, 1, "Again"], {}]"#
        ),
        err(
            "InsertError",
            r#"Failed to insert: Duplicate key exists in unique index "primary" in space "customers" with old tuple - [10, 569, "Elizabeth", 12] and new tuple - [10, 1, "Again"]"#
        )
    );
    assert_eq!(
        call(&mut engine, "crud.insert", r#"["nospace", [1], {}]"#),
        err("InsertError", "Space \"nospace\" doesn't exist")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [11, null, "X"], {"noreturn": true}]"#
        ),
        "[null, null]"
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [12, null, "Y", 3], {"fields": ["name", "id"]}]"#
        ),
        r#"[{"metadata": [{"name": "name", "type": "string"}, {"name": "id", "type": "unsigned"}], "rows": [["Y", 12]]}, null]"#
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.insert",
            r#"["customers", [13, null, "Z"], {"fields": ["nofield"]}]"#
        ),
        err(
            "FilterFieldsError",
            "Space format doesn't contain field named \"nofield\""
        )
    );
    assert_eq!(call(&mut engine, "crud.len", r#"["customers"]"#), "[5]");
}

#[test]
fn objects_flatten_by_the_format() {
    let mut engine = engine();
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_object",
            r#"["customers", {"name": "Elizabeth", "age": 12, "id": 10}, {}]"#
        ),
        ok(r#"[[10, 569, "Elizabeth", 12]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.insert_object", r#"["customers", {"id": 11, "name": "A", "zzz": 1}, {}]"#),
        err("InsertError", "Failed to flatten object: FlattenError: Object is specified in bad format: FlattenError: Unknown field \"zzz\" is specified")
    );
    assert_eq!(
        call(&mut engine, "crud.insert_object", r#"["customers", {"id": 11}, {}]"#),
        err("InsertError", "Failed to flatten object: FlattenError: Object is specified in bad format: FlattenError: Field \"name\" isn't nullable (set skip_nullability_check_on_flatten option to true to skip check)")
    );
    // Skipping the check lets storage judge the tuple.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_object",
            r#"["customers", {"id": 11}, {"skip_nullability_check_on_flatten": true}]"#
        ),
        err(
            "InsertError",
            "Failed to insert: Tuple field 3 (name) type does not match one required by operation: expected string, got nil"
        )
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.replace_object",
            r#"["customers", {"id": 10, "bucket_id": 5, "name": "Liz"}, {}]"#
        ),
        ok(r#"[[10, 5, "Liz", null]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.upsert_object",
            r#"["customers", {"id": 10, "name": "X"}, [["=", "name", "Beth"]], {}]"#
        ),
        ok("[]")
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 10]"#),
        ok(r#"[[10, 5, "Beth", null]]"#)
    );
}

#[test]
fn key_operations_take_scalar_or_array_keys() {
    let mut engine = engine();
    call(
        &mut engine,
        "crud.insert",
        r#"["customers", [10, null, "Elizabeth", 12], {}]"#,
    );
    let row = r#"[[10, 569, "Elizabeth", 12]]"#;
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 10, {}]"#),
        ok(row)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.get",
            r#"["customers", [10], {"mode": "read"}]"#
        ),
        ok(row)
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 99, {}]"#),
        ok("[]")
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", "x", {}]"#),
        err("GetError", "Failed to get: Supplied key type of part 0 does not match index part type: expected unsigned")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.get",
            r#"["customers", 10, {"fields": ["age"]}]"#
        ),
        r#"[{"metadata": [{"name": "age", "type": "number", "is_nullable": true}], "rows": [[12]]}, null]"#
    );
    // 1-based field numbers and field names.
    assert_eq!(
        call(
            &mut engine,
            "crud.update",
            r#"["customers", 10, [["=", 3, "Liz"], ["+", "age", 1]], {}]"#
        ),
        ok(r#"[[10, 569, "Liz", 13]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.update",
            r#"["customers", 99, [["=", 3, "X"]], {}]"#
        ),
        ok("[]")
    );
    assert_eq!(
        call(&mut engine, "crud.update", r#"["customers", 10, [["=", 1, 11]], {}]"#),
        err("UpdateError", "Failed to update: Attempt to modify a tuple field which is part of primary index in space 'customers'")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.update",
            r#"["customers", 10, [["=", 3, "L"]], {"noreturn": true}]"#
        ),
        "[null, null]"
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.replace",
            r#"["customers", [10, null, "Eliza"], {}]"#
        ),
        ok(r#"[[10, 569, "Eliza"]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.upsert",
            r#"["customers", [20, null, "New"], [["+", 4, 1]], {}]"#
        ),
        ok("[]")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.upsert",
            r#"["customers", [20, null, "New", 1], [["=", "name", "Old"]], {}]"#
        ),
        ok("[]")
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 20]"#),
        ok(r#"[[20, 826, "Old"]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.delete", r#"["customers", 20, {}]"#),
        ok(r#"[[20, 826, "Old"]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.delete", r#"["customers", [20], {}]"#),
        ok("[]")
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.delete",
            r#"["customers", 10, {"noreturn": true}]"#
        ),
        "[null, null]"
    );
    assert_eq!(
        call(&mut engine, "crud.delete", r#"["nospace", 10]"#),
        err("DeleteError", "Space \"nospace\" doesn't exist")
    );
    assert_eq!(
        call(&mut engine, "crud.upsert", r#"["customers", [1, null, 5], [], {}]"#),
        err("UpsertError", "Failed to upsert: Tuple field 3 (name) type does not match one required by operation: expected string, got unsigned")
    );
}

#[test]
fn bad_arguments_and_options_are_raised_as_lua_errors() {
    let mut engine = engine();
    let lua = |message: &str| Raised::lua(message);
    assert_eq!(
        raised(
            &mut engine,
            "crud.insert",
            r#"["customers", [1, null, "a"], {"badopt": 1}]"#
        ),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/insert.lua:191: unexpected argument opts.badopt to nil")
    );
    assert_eq!(
        raised(
            &mut engine,
            "crud.insert",
            r#"["customers", [1, null, "a"], {"timeout": "x"}]"#
        ),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/insert.lua:191: bad argument opts.timeout to nil (?number expected, got string)")
    );
    assert_eq!(
        raised(&mut engine, "crud.insert", r#"[1, [1, null, "a"], {}]"#),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/insert.lua:191: bad argument #1 to nil (string expected, got number)")
    );
    assert_eq!(
        raised(&mut engine, "crud.insert", r#"["customers", 5]"#),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/insert.lua:191: bad argument #2 to nil (table expected, got number)")
    );
    assert_eq!(
        raised(&mut engine, "crud.get", r#"["customers", 1, 5]"#),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/get.lua:236: bad argument #3 to nil (?table expected, got number)")
    );
    // An option another function takes is still unknown here.
    assert_eq!(
        raised(&mut engine, "crud.get", r#"["customers", 1, {"first": 1}]"#),
        lua("/opt/tarantool/.rocks/share/tarantool/crud/get.lua:236: unexpected argument opts.first to nil")
    );
    // crud.select runs its checks inside a pcall: their error is returned.
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"fields": 1}]"#
        ),
        err(
            "SelectError",
            "...ool/.rocks/share/tarantool/crud/common/sharding/init.lua:252: \
             ...ool/.rocks/share/tarantool/crud/select/compat/select.lua:336: \
             bad argument opts.fields to nil (?table expected, got number)"
        )
    );
    // Options set to nil are absent.
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"first": null}]"#
        ),
        ok("[]")
    );
    assert_eq!(
        raised(&mut engine, "crud.pairs", r#"["customers", null, {}]"#),
        lua("unsupported Lua type 'cdata'")
    );
    assert_eq!(
        raised(
            &mut engine,
            "crud.pairs",
            r#"["customers", null, {"zzz": 1}]"#
        ),
        lua("...ool/.rocks/share/tarantool/crud/select/compat/select.lua:205: unexpected argument opts.zzz to nil")
    );
    let missing = raised(&mut engine, "crud.nope", "[]");
    assert_eq!(missing.code, ErrorCode::ER_NO_SUCH_PROC);
    assert_eq!(missing.message, "Procedure 'crud.nope' is not defined");
}

#[test]
fn raised_errors_are_error_32_packets() {
    let mut out = Vec::new();
    encode_reply(&mut out, 7, 1, &CrudReply::Raised(Raised::lua("boom")));
    let status = out[5..].windows(3).position(|w| w == [0x00, 0xcd, 0x80]);
    assert!(status.is_some(), "{out:x?}");
    assert!(
        out.windows(2).any(|w| w == [0x05, 32]),
        "code 32 in the stack"
    );
    let mut out = Vec::new();
    encode_reply(&mut out, 7, 1, &CrudReply::Values(vec![0x91, 0xc3]));
    assert_eq!(&out[out.len() - 4..], &[0x81, 0x30, 0x91, 0xc3]);
}

#[test]
fn len_truncate_count_storage_info_and_stats() {
    let mut engine = engine();
    customers(&mut engine);
    assert_eq!(call(&mut engine, "crud.len", r#"["customers", {}]"#), "[9]");
    assert_eq!(
        call(
            &mut engine,
            "crud.count",
            r#"["customers", [[">=", "age", 30]], {}]"#
        ),
        "[4, null]"
    );
    assert_eq!(
        call(&mut engine, "crud.count", r#"["customers", null]"#),
        "[9, null]"
    );
    assert_eq!(
        call(&mut engine, "crud.count", r#"["nospace", null]"#),
        err("CountError", "Space \"nospace\" doesn't exist")
    );
    assert_eq!(
        call(&mut engine, "crud.len", r#"["nospace"]"#),
        err("LenError", "Space \"nospace\" doesn't exist")
    );
    assert_eq!(
        call(&mut engine, "crud.storage_info", "[{}]"),
        format!(r#"[{{"{UUID}": {{"status": "running", "is_master": true}}}}]"#)
    );
    assert_eq!(call(&mut engine, "crud.stats", "[]"), "[[]]");
    assert_eq!(
        call(
            &mut engine,
            "crud.truncate",
            r#"["customers", {"timeout": 1}]"#
        ),
        "[true]"
    );
    assert_eq!(call(&mut engine, "crud.len", r#"["customers"]"#), "[0]");
    assert_eq!(
        call(&mut engine, "crud.truncate", r#"["nospace"]"#),
        err("TruncateError", &format!("Failed to truncate: CallError: Failed for {UUID}: Function returned an error: TruncateError: Space \"nospace\" doesn't exist"))
    );
}

#[test]
fn min_and_max_by_index() {
    let mut engine = engine();
    assert_eq!(
        call(&mut engine, "crud.min", r#"["customers", null, {}]"#),
        ok("[]")
    );
    customers(&mut engine);
    assert_eq!(
        call(&mut engine, "crud.min", r#"["customers", null, {}]"#),
        ok(r#"[[1, 477, "Elizabeth", 12]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.max", r#"["customers", "primary", {}]"#),
        ok(r#"[[9, 1644, "Alice", 18]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.max",
            r#"["customers", "age", {"fields": ["name"]}]"#
        ),
        r#"[{"metadata": [{"name": "name", "type": "string"}], "rows": [["William"]]}, null]"#
    );
    assert_eq!(
        call(&mut engine, "crud.min", r#"["customers", 2]"#),
        ok(r#"[[1, 477, "Elizabeth", 12]]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.min", r#"["customers", "noidx", {}]"#),
        err(
            "BorderError",
            "Index \"noidx\" of space \"customers\" doesn't exist"
        )
    );
}

#[test]
fn select_scans_the_chosen_index_in_iterator_direction() {
    let mut engine = engine();
    customers(&mut engine);
    // No conditions: primary index, ascending.
    let all = call(&mut engine, "crud.select", r#"["customers", null, {}]"#);
    assert_eq!(ids(&all), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // `<` on an indexed field scans that index descending; ties by pk descending too.
    let young = call(
        &mut engine,
        "crud.select",
        r#"["customers", [["<", "age", 30]], {}]"#,
    );
    assert_eq!(ids(&young), [6, 8, 7, 9, 1]);
    let plan = |conditions: &str| {
        let engine = engine_with_rows();
        let space = engine.space_by_name("customers").unwrap();
        let planned =
            select::plan_select(Func::Select, Ok(space), &json(conditions), None, None, None)
                .unwrap_or_else(|_| panic!("plan {conditions}"));
        (
            planned.plan.index_id,
            planned.plan.iterator,
            msgpack_to_text(&planned.plan.key),
            planned.plan.filters.len(),
        )
    };
    use crate::storage::IteratorType as It;
    assert_eq!(plan("null"), (0, It::Ge, "[]".into(), 0));
    assert_eq!(
        plan(r#"[["==", "name", "Tom"]]"#),
        (0, It::Ge, "[]".into(), 1)
    );
    // The first condition naming an index (or a first index part) wins; the rest filter.
    assert_eq!(
        plan(r#"[["==", "name", "Tom"], [">", "age", 20], ["<=", "id", 5]]"#),
        (2, It::Gt, "[20]".into(), 2)
    );
    assert_eq!(
        plan(r#"[["<=", "primary", [5]], [">", "age", 20]]"#),
        (0, It::Le, "[5]".into(), 1)
    );
    assert_eq!(
        plan(r#"[["=", "bucket_id", 7]]"#),
        (1, It::Eq, "[7]".into(), 0)
    );
    assert_eq!(
        plan(r#"[[">=", "primary", 3]]"#),
        (0, It::Ge, "[3]".into(), 0)
    );

    let filtered = call(
        &mut engine,
        "crud.select",
        r#"["customers", [[">", "age", 20], ["==", "name", "William"]], {}]"#,
    );
    assert_eq!(ids(&filtered), [6, 4]);
    let by_pk = call(
        &mut engine,
        "crud.select",
        r#"["customers", [["<=", "id", 5], [">=", "age", 33.0]], {}]"#,
    );
    assert_eq!(ids(&by_pk), [5, 4, 3, 2]);
    // Filtering on a field the format does not have yields nothing.
    let unknown = call(
        &mut engine,
        "crud.select",
        r#"["customers", [["==", "nofield", 1]], {}]"#,
    );
    assert_eq!(unknown, ok("[]"));
    let first = call(
        &mut engine,
        "crud.select",
        r#"["customers", [[">=", "age", 20]], {"first": 3}]"#,
    );
    assert_eq!(ids(&first), [7, 8, 6]);
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"first": 0}]"#
        ),
        ok("[]")
    );
}

fn engine_with_rows() -> Engine {
    let mut engine = engine();
    customers(&mut engine);
    engine
}

#[test]
fn select_errors_are_crud_texts() {
    let mut engine = engine_with_rows();
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", [["~=", "id", 1]], {}]"#
        ),
        err(
            "SelectError",
            r#"Failed to parse conditions: ParseConditionError: condition[1] "~=" isn't a valid condition operator, (condition 1)"#
        )
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", [["==", "id", "x"]], {}]"#
        ),
        err(
            "SelectError",
            "Supplied key type of part 0 does not match index part type: expected unsigned"
        )
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"first": -2}]"#
        ),
        err(
            "SelectError",
            "Negative first should be specified only with after option"
        )
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"fields": ["nofield"]}]"#
        ),
        err(
            "FilterFieldsError",
            r#"Space format doesn't contain field named "nofield""#
        )
    );
    assert_eq!(
        call(&mut engine, "crud.select", r#"["nospace", null, {}]"#),
        err("SelectError", r#"Space "nospace" doesn't exist"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", null, {"yield_every": 0}]"#
        ),
        err("SelectError", "yield_every should be > 0")
    );
}

#[test]
fn select_fields_append_scan_and_primary_key_fields() {
    let mut engine = engine_with_rows();
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", [["<=", "id", 2]], {"fields": ["name"]}]"#
        ),
        r#"[{"metadata": [{"name": "name", "type": "string"}, {"name": "id", "type": "unsigned"}], "rows": [["Mary", 2], ["Elizabeth", 1]]}, null]"#
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", [[">", "age", 40]], {"fields": ["name"]}]"#
        ),
        r#"[{"metadata": [{"name": "name", "type": "string"}, {"name": "age", "type": "number", "is_nullable": true}, {"name": "id", "type": "unsigned"}], "rows": [["Mary", 46, 2], ["William", 81, 4]]}, null]"#
    );
    // `after` in the fields layout.
    assert_eq!(
        call(
            &mut engine,
            "crud.select",
            r#"["customers", [[">", "age", 30]], {"fields": ["name"], "after": ["David", 33, 3], "first": 1}]"#
        ),
        r#"[{"metadata": [{"name": "name", "type": "string"}, {"name": "age", "type": "number", "is_nullable": true}, {"name": "id", "type": "unsigned"}], "rows": [["Jack", 35, 5]]}, null]"#
    );
}

#[test]
fn negative_first_returns_the_rows_before_after_in_normal_order() {
    let mut engine = engine_with_rows();
    // Spec §18.5: {'>', 'id', 2}, first -2, after id 6 ⇒ ids 4, 5.
    let before = call(
        &mut engine,
        "crud.select",
        r#"["customers", [[">", "id", 2]], {"first": -2, "after": [6, 1, "William", 25]}]"#,
    );
    assert_eq!(ids(&before), [4, 5]);
    let after = call(
        &mut engine,
        "crud.select",
        r#"["customers", [[">", "id", 2]], {"first": 2, "after": [6, 1, "William", 25]}]"#,
    );
    assert_eq!(ids(&after), [7, 8]);
    // Before the start of the range: only what the condition admits.
    let edge = call(
        &mut engine,
        "crud.select",
        r#"["customers", [[">", "id", 2]], {"first": -5, "after": [4, 1, "William", 81]}]"#,
    );
    assert_eq!(ids(&edge), [3]);
    // Descending scan: "before" means greater keys.
    let desc = call(
        &mut engine,
        "crud.select",
        r#"["customers", [["<", "age", 30]], {"first": -2, "after": [9, 1, "Alice", 18]}]"#,
    );
    assert_eq!(ids(&desc), [8, 7]);
}

/// Walks a whole scan in pages of `page` rows, forward with `first = page` and backward
/// (from the last row) with `first = -page`; returns the ids in scan order both times.
fn walk(engine: &mut Engine, conditions: &str, page: i64) -> (Vec<u64>, Vec<u64>) {
    let page_of = |engine: &mut Engine, first: i64, after: Option<&str>| {
        let after = after.map_or(String::new(), |a| format!(r#", "after": {a}"#));
        let reply = call(
            engine,
            "crud.select",
            &format!(r#"["pages", {conditions}, {{"first": {first}{after}}}]"#),
        );
        let rows_at = reply.find("\"rows\": ").unwrap() + 8;
        let rows = &reply[rows_at..reply.rfind("}, null]").unwrap()];
        (ids(&reply), rows.to_string())
    };
    let last_row = |rows: &str, first_row: bool| -> Option<String> {
        let inner = &rows[1..rows.len() - 1];
        if inner.is_empty() {
            return None;
        }
        let rows: Vec<&str> = inner.split("], [").collect();
        let row = if first_row {
            rows[0]
        } else {
            rows[rows.len() - 1]
        };
        Some(format!("[{}]", row.trim_matches(|c| c == '[' || c == ']')))
    };
    let mut forward = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (ids, rows) = page_of(engine, page, after.as_deref());
        assert!(ids.len() as i64 <= page);
        forward.extend(&ids);
        match last_row(&rows, false) {
            Some(last) if ids.len() as i64 == page => after = Some(last),
            _ => break,
        }
    }
    // Backward: start after the last row of the scan, walk back.
    let mut backward = Vec::new();
    let mut after = Some(format!(
        "[{}, 1, {}]",
        forward[forward.len() - 1],
        forward[forward.len() - 1] % 7
    ));
    backward.push(forward[forward.len() - 1]);
    loop {
        let (ids, rows) = page_of(engine, -page, after.as_deref());
        assert!(ids.len() as i64 <= page);
        let mut page_ids = ids.clone();
        page_ids.append(&mut backward);
        backward = page_ids;
        match last_row(&rows, true) {
            Some(first) if ids.len() as i64 == page => after = Some(first),
            _ => break,
        }
    }
    (forward, backward)
}

fn pages(engine: &mut Engine, count: u64) {
    for id in 1..=count {
        call(
            engine,
            "crud.insert",
            &format!(
                r#"["pages", [{id}, null, {}], {{"noreturn": true}}]"#,
                id % 7
            ),
        );
    }
}

#[test]
fn after_pagination_walks_1000_rows_in_pages_of_100_both_ways() {
    let mut engine = engine();
    pages(&mut engine, 1000);
    let ascending: Vec<u64> = (1..=1000).collect();
    let (forward, backward) = walk(&mut engine, "null", 100);
    assert_eq!(forward, ascending);
    assert_eq!(backward, ascending);
    let descending: Vec<u64> = (1..=1000).rev().collect();
    let (forward, backward) = walk(&mut engine, r#"[["<=", "id", 1000]]"#, 100);
    assert_eq!(forward, descending);
    assert_eq!(backward, descending);
    // A non-unique secondary index: ties are ordered (and resumed) by primary key.
    let mut by_group: Vec<u64> = (1..=1000).collect();
    by_group.sort_by_key(|&id| (id % 7, id));
    let (forward, backward) = walk(&mut engine, r#"[[">=", "group", 0]]"#, 100);
    assert_eq!(forward, by_group);
    assert_eq!(backward, by_group);
    let reversed: Vec<u64> = by_group.iter().rev().copied().collect();
    let (forward, backward) = walk(&mut engine, r#"[["<", "group", 7]]"#, 100);
    assert_eq!(forward, reversed);
    assert_eq!(backward, reversed);
}

#[test]
fn shards_scan_their_part_and_the_merge_orders_by_scan_key() {
    // Two engines stand for two shards; rows are placed by the server's rule.
    let mut shards = [engine(), engine()];
    let mut single = engine();
    for id in 1..=300u64 {
        let args = format!(r#"["pages", [{id}, null, {}], {{}}]"#, id % 7);
        call(&mut single, "crud.insert", &args);
        let mut key = crate::storage::key::SearchKeyBuf::new();
        key.extend_from_slice(&id.to_be_bytes());
        let owner = crate::placement::shard_of_key(&key, 2);
        call(&mut shards[owner], "crud.insert", &args);
    }
    assert!(shards
        .iter()
        .all(|shard| shard.space(513).unwrap().len() > 100));
    for (conditions, first, after) in [
        ("null", 50i64, "null"),
        (r#"[["<", "group", 5]]"#, 40, r#"[100, 1, 2]"#),
        (
            r#"[[">=", "group", 3], ["<", "id", 250]]"#,
            -30,
            r#"[200, 1, 4]"#,
        ),
    ] {
        let args = json(&format!(
            r#"["pages", {conditions}, {{"first": {first}, "after": {after}}}]"#
        ));
        let Ok(Plan::Select(planned)) = plan(&single, &config(), "crud.select", &args) else {
            panic!("not a select plan");
        };
        let runs: Vec<_> = shards
            .iter()
            .map(|shard| select::scan_shard(shard, &planned.plan))
            .collect();
        assert!(runs
            .iter()
            .all(|run| run.as_ref().unwrap().len() <= first.unsigned_abs() as usize));
        let space = single.space(513).unwrap();
        let merged = finish_select(space, &planned, runs);
        let CrudReply::Values(expected) =
            execute_on_engine(&mut single, &config(), "crud.select", &args)
        else {
            panic!("raised");
        };
        assert_eq!(
            msgpack_to_text(&merged),
            msgpack_to_text(&expected),
            "{conditions}"
        );
        assert_eq!(
            ids(&msgpack_to_text(&merged)).len(),
            first.unsigned_abs() as usize
        );
    }
}

fn call_error(text: &str, tuple: &str) -> String {
    let err = format!("Failed for {UUID}: Function returned an error: {text}").replace('"', "\\\"");
    format!(
        r#"{{"class_name": "CallError", "err": "{err}", "str": "CallError: {err}", "operation_data": {tuple}}}"#
    )
}

const DUPLICATE_3: &str = r#"Duplicate key exists in unique index "primary" in space "customers" with old tuple - [3, 5, "C"] and new tuple - [3, 5, "X"]"#;

#[test]
fn many_applies_in_order_and_reports_errors_as_crud_does() {
    let mut engine = engine();
    let rows = |rows: &str| format!(r#"{{"metadata": {META}, "rows": {rows}}}"#);
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_many",
            r#"["customers", [[1, 5, "A"], [2, 5, "B"]], {}]"#
        ),
        format!(r#"[{}, null]"#, rows(r#"[[1, 5, "A"], [2, 5, "B"]]"#))
    );
    call(&mut engine, "crud.insert", r#"["customers", [3, 5, "C"]]"#);
    // Every tuple is attempted; the failures are listed.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_many",
            r#"["customers", [[4, 5, "D"], [3, 5, "X"], [5, 5, "E"]], {}]"#
        ),
        format!(
            "[{}, [{}]]",
            rows(r#"[[4, 5, "D"], [5, 5, "E"]]"#),
            call_error(DUPLICATE_3, r#"[3, 5, "X"]"#)
        )
    );
    // stop_on_error: the rest is not performed.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_many",
            r#"["customers", [[6, 5, "F"], [3, 5, "X"], [7, 5, "G"]], {"stop_on_error": true}]"#
        ),
        format!(
            "[{}, [{}, {}]]",
            rows(r#"[[6, 5, "F"]]"#),
            call_error(DUPLICATE_3, r#"[3, 5, "X"]"#),
            call_error("Operation with tuple was not performed", r#"[7, 5, "G"]"#)
        )
    );
    // rollback_on_error: what was applied is undone; no result.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_many",
            r#"["customers", [[8, 5, "H"], [3, 5, "X"], [9, 5, "I"]], {"rollback_on_error": true}]"#
        ),
        format!(
            "[null, [{}, {}, {}]]",
            call_error(DUPLICATE_3, r#"[3, 5, "X"]"#),
            call_error("Operation with tuple was rollback", r#"[8, 5, "H"]"#),
            call_error("Operation with tuple was rollback", r#"[9, 5, "I"]"#)
        )
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 8]"#),
        ok("[]")
    );
    // Both: failed, then not performed, then rolled back.
    assert_eq!(
        call(
            &mut engine,
            "crud.insert_many",
            r#"["customers", [[10, 5, "J"], [3, 5, "X"], [11, 5, "K"]], {"stop_on_error": true, "rollback_on_error": true}]"#
        ),
        format!(
            "[null, [{}, {}, {}]]",
            call_error(DUPLICATE_3, r#"[3, 5, "X"]"#),
            call_error("Operation with tuple was not performed", r#"[11, 5, "K"]"#),
            call_error("Operation with tuple was rollback", r#"[10, 5, "J"]"#)
        )
    );
    assert_eq!(call(&mut engine, "crud.len", r#"["customers"]"#), "[6]");
    // replace_many undoes a replace by restoring the old tuple.
    call(
        &mut engine,
        "crud.replace_many",
        r#"["customers", [[1, 5, "Z"], [2, 5, 7]], {"rollback_on_error": true}]"#,
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 1]"#),
        ok(r#"[[1, 5, "A"]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.replace_many",
            r#"["customers", [[1, 5, "Z"]], {"noreturn": true}]"#
        ),
        "[null, null]"
    );
    assert_eq!(
        call(&mut engine, "crud.insert_many", r#"["customers", [], {}]"#),
        r#"[null, [{"class_name": "InsertManyError", "err": "At least one tuple expected", "str": "InsertManyError: At least one tuple expected"}]]"#
    );
    assert_eq!(
        call(&mut engine, "crud.insert_many", r#"["nospace", [[1]], {}]"#),
        r#"[null, [{"class_name": "InsertManyError", "err": "Space \"nospace\" doesn't exist", "str": "InsertManyError: Space \"nospace\" doesn't exist"}]]"#
    );
}

#[test]
fn upsert_many_returns_metadata_only_and_objects_carry_their_errors() {
    let mut engine = engine();
    assert_eq!(
        call(
            &mut engine,
            "crud.upsert_many",
            r#"["customers", [[[1, 5, "A"], [["=", 3, "B"]]], [[1, 5, "A"], [["=", "name", "C"]]]], {}]"#
        ),
        format!(r#"[{{"metadata": {META}}}, null]"#)
    );
    assert_eq!(
        call(&mut engine, "crud.get", r#"["customers", 1]"#),
        ok(r#"[[1, 5, "C"]]"#)
    );
    assert_eq!(
        call(
            &mut engine,
            "crud.upsert_object_many",
            r#"["customers", [[{"id": 2, "name": "D"}, []]], {"fields": ["id"]}]"#
        ),
        r#"[{"metadata": [{"name": "id", "type": "unsigned"}]}, null]"#
    );
    let reply = call(
        &mut engine,
        "crud.insert_object_many",
        r#"["customers", [{"id": 3, "name": "E", "zzz": 1}, {"id": 4, "name": "F", "bucket_id": 9}], {}]"#,
    );
    let flatten = "Failed to flatten object: FlattenError: Object is specified in bad format: FlattenError: Unknown field \\\"zzz\\\" is specified";
    assert_eq!(
        reply,
        format!(
            r#"[{{"metadata": {META}, "rows": [[4, 9, "F", null]]}}, [{{"class_name": "InsertManyError", "err": "{flatten}", "str": "InsertManyError: {flatten}", "operation_data": {{"id": 3, "name": "E", "zzz": 1}}}}]]"#
        )
    );
}

/// Every change a crud call makes on a shard — point writes, a `*_many` rollback's undos,
/// truncate — is in the WAL: a shard recovered from it holds exactly what the live one does.
#[test]
fn crud_changes_are_logged_and_recover_exactly() {
    use crate::server::{data_dir::DataDir, durability, schema};
    use crate::shard::Shard;
    use crate::storage::IteratorType;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server_config =
        crate::config::Config::from_toml_str(crate::config::SHIPPED_CONFIG_TOML).expect("config");
    server_config.data_dir = dir.path().join("data");
    server_config.durability.wal_mode = crate::config::WalMode::Write;
    let data_dir = DataDir::open(&server_config).expect("data dir");
    let fingerprint = data_dir.fingerprint();
    let dump = |engine: &Engine| -> Vec<String> {
        let space = engine.space_by_name("kv").expect("kv");
        space
            .select(0, IteratorType::All as u32, &[0x90])
            .expect("scan")
            .map(|(_, tuple)| msgpack_to_text(tuple.data()))
            .collect()
    };
    let calls: &[(&str, &str)] = &[
        (
            "crud.insert_many",
            r#"["kv", [[1, null, "a"], [2, null, "b"], [3, null, "c"]], {}]"#,
        ),
        ("crud.truncate", r#"["kv", {}]"#),
        ("crud.insert", r#"["kv", [10, null, "x"], {}]"#),
        ("crud.insert", r#"["kv", [11, null, "y"], {}]"#),
        ("crud.replace", r#"["kv", [10, 7, "x2"], {}]"#),
        ("crud.update", r#"["kv", 11, [["=", 3, "y2"]], {}]"#),
        (
            "crud.upsert",
            r#"["kv", [12, null, "z"], [["=", 3, "no"]], {}]"#,
        ),
        (
            "crud.upsert",
            r#"["kv", [12, null, "z"], [["=", 3, "z2"]], {}]"#,
        ),
        (
            "crud.insert_object",
            r#"["kv", {"id": 13, "value": "w"}, {}]"#,
        ),
        ("crud.delete", r#"["kv", 13, {}]"#),
        // 14 is inserted, then rolled back when 10 fails: the undo is logged too.
        (
            "crud.insert_many",
            r#"["kv", [[14, null, "r"], [10, null, "dup"]], {"rollback_on_error": true}]"#,
        ),
        (
            "crud.replace_many",
            r#"["kv", [[15, null, "m"], [11, null, "y3"]], {}]"#,
        ),
        ("crud.upsert_many", r#"["kv", [[[16, null, "n"], []]], {}]"#),
    ];
    let bucket_of = |pk: &str| bucket::tarantool_crc32(pk.as_bytes()) % 3000 + 1;
    let (live, rows_logged) = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(async {
            let mut engine = schema::build_engine(&server_config, 1 << 30).expect("engine");
            let lsn_next =
                durability::recover_shard(&server_config, 0, fingerprint, 0, &mut engine)
                    .expect("recover")
                    .lsn_next;
            let wal = durability::start_wal(&server_config, 0, fingerprint, lsn_next).expect("wal");
            let mut shard = Shard::new(0, engine, wal);
            let mut out = Vec::new();
            for (function, args) in calls {
                let ran =
                    plan_and_run(&mut shard, &config(), 1, 1, function, &json(args), &mut out);
                if let Some(commit) = ran.commit {
                    commit.await.expect("durable");
                }
            }
            let wal = shard.wal.take().expect("a WAL");
            let rows_logged = wal.lsn_next() - lsn_next;
            wal.close().await.expect("close");
            (dump(&shard.engine), rows_logged)
        });
    assert_eq!(
        live,
        [
            r#"[10, 7, "x2"]"#.to_string(),
            format!(r#"[11, {}, "y3"]"#, bucket_of("11")),
            format!(r#"[12, {}, "z2"]"#, bucket_of("12")),
            format!(r#"[15, {}, "m"]"#, bucket_of("15")),
            format!(r#"[16, {}, "n"]"#, bucket_of("16")),
        ]
    );
    // 3 inserts, 3 truncate deletes, 2 inserts, replace, update, 2 upserts, insert, delete,
    // insert + undo, 2 replaces, upsert.
    assert_eq!(rows_logged, 19);
    let mut recovered = schema::build_engine(&server_config, 1 << 30).expect("engine");
    durability::recover_shard(&server_config, 0, fingerprint, 0, &mut recovered).expect("recover");
    assert_eq!(dump(&recovered), live);
}

/// The one-pass decoder and planner against the general ones: whenever they answer, they
/// answer exactly as the general path does, and the server's entry points answer as the
/// general ones always.
mod fast_paths {
    use super::*;
    use crate::msgpack::{write_f64, write_int, write_str, write_uint};
    use crate::protocol::client;
    use crate::protocol::decode_packet_general;
    use crate::protocol::reply;
    use crate::protocol::request::Request;
    use proptest::prelude::*;

    /// One msgpack scalar of the kinds crud arguments hold, in every width.
    fn scalar() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<u64>().prop_map(|u| {
                let mut out = Vec::new();
                write_uint(&mut out, u >> (u % 64));
                out
            }),
            any::<i64>().prop_map(|i| {
                let mut out = Vec::new();
                write_int(&mut out, i);
                out
            }),
            "[a-z_.]{0,12}".prop_map(|text| {
                let mut out = Vec::new();
                write_str(&mut out, text.as_bytes());
                out
            }),
            Just(vec![0xc0]),
            Just(vec![0xc3]),
            any::<f64>().prop_map(|f| {
                let mut out = Vec::new();
                write_f64(&mut out, f);
                out
            }),
            // Wider headers than needed: uint 64, str 8, array 16.
            Just(vec![0xcf, 0, 0, 0, 0, 0, 0, 0, 7]),
            Just(vec![0xd9, 2, b'k', b'v']),
        ]
    }

    /// A value: a scalar, an array of scalars or a map of string keys.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            3 => scalar(),
            3 => proptest::collection::vec(scalar(), 0..5).prop_map(|items| {
                let mut out = Vec::new();
                crate::msgpack::write_array_len(&mut out, items.len() as u32);
                items.iter().for_each(|item| out.extend_from_slice(item));
                out
            }),
            1 => proptest::collection::vec(scalar(), 0..5).prop_map(|items| {
                let mut out = vec![0xdc, 0, items.len() as u8];
                items.iter().for_each(|item| out.extend_from_slice(item));
                out
            }),
            1 => proptest::collection::vec(("[a-z_]{1,9}", scalar()), 0..3).prop_map(|pairs| {
                let mut out = Vec::new();
                mp::write_map_len(&mut out, pairs.len() as u32);
                for (key, value) in pairs {
                    write_str(&mut out, key.as_bytes());
                    out.extend_from_slice(&value);
                }
                out
            }),
        ]
    }

    fn space_name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(json(r#""customers""#)),
            Just(json(r#""pages""#)),
            Just(json(r#""nope""#)),
            Just(vec![0xd9, 5, b'p', b'a', b'g', b'e', b's']),
            value(),
        ]
    }

    fn opts() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(vec![0xc0]),
            Just(vec![0x80]),
            Just(vec![0x90]),
            Just(vec![0xde, 0, 0]),
            Just(json(r#"{"noreturn": true}"#)),
            Just(json(r#"{"fields": ["id"]}"#)),
            Just(json(r#"{"bucket_id": 5}"#)),
            Just(json(r#"{"badopt": 1}"#)),
            value(),
        ]
    }

    /// A tuple for `customers`/`pages`: the usual `[id, nil, ...]`, or anything.
    fn tuple() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (
                any::<u16>(),
                proptest::option::of(any::<u16>()),
                "[a-z]{0,8}"
            )
                .prop_map(|(id, bucket_id, name)| {
                    let bucket_id = bucket_id.map_or("null".to_string(), |b| b.to_string());
                    json(&format!(r#"[{id}, {bucket_id}, "{name}"]"#))
                }),
            any::<u16>().prop_map(|id| json(&format!("[{id}]"))),
            value(),
        ]
    }

    fn ops() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(json(r#"[["+", 4, 1]]"#)),
            Just(json(r#"[["=", "name", "x"]]"#)),
            Just(json("[]")),
            value(),
        ]
    }

    /// `[space, second, third, opts]` cut to `count` arguments.
    fn args() -> impl Strategy<Value = Vec<u8>> {
        (
            space_name(),
            prop_oneof![tuple(), value()],
            ops(),
            opts(),
            0usize..6,
        )
            .prop_map(|(space, second, third, opts, count)| {
                let items = [space, second, third, opts, vec![0xc0]];
                let count = count.min(items.len());
                let mut out = Vec::new();
                crate::msgpack::write_array_len(&mut out, count as u32);
                items[..count]
                    .iter()
                    .for_each(|item| out.extend_from_slice(item));
                out
            })
    }

    fn function() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            4 => proptest::sample::select(
                &["crud.insert", "crud.replace", "crud.upsert", "crud.update", "crud.delete", "crud.get"][..]
            ),
            1 => proptest::sample::select(&Func::ALL[..]).prop_map(Func::name),
            1 => Just("crud.nope"),
            1 => Just("box.info"),
        ]
    }

    /// A CALL packet with a header of the keys the server reads (in any order, sometimes
    /// another key or type), and a body with its two keys in either order.
    fn packet() -> impl Strategy<Value = Vec<u8>> {
        (
            function(),
            args(),
            any::<u64>(),
            proptest::sample::select(&[10u8, 10, 10, 6, 1][..]),
            any::<bool>(),
            0u8..4,
            proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
            any::<usize>(),
        )
            .prop_map(
                |(name, args, sync, request_type, name_first, extra, flips, cut)| {
                    let mut header = Vec::new();
                    let keys = [2, 3, 4, 3][usize::from(extra)];
                    mp::write_map_len(&mut header, keys);
                    let mut body_of = |key: u8, value: &dyn Fn(&mut Vec<u8>)| {
                        header.push(key);
                        value(&mut header);
                    };
                    if extra == 3 {
                        body_of(0x01, &|out| write_uint(out, sync));
                        body_of(0x00, &|out| out.push(request_type));
                    } else {
                        body_of(0x00, &|out| out.push(request_type));
                        body_of(0x01, &|out| write_uint(out, sync >> (sync % 64)));
                    }
                    if extra >= 1 {
                        body_of(0x05, &|out| write_uint(out, 0));
                    }
                    if extra == 2 {
                        // TIMESTAMP: read by the general decoder only.
                        body_of(0x04, &|out| write_f64(out, 1.5));
                    }
                    let mut packet = header;
                    packet.push(0x82);
                    let mut name_pair = vec![0x22];
                    write_str(&mut name_pair, name.as_bytes());
                    let mut args_pair = vec![0x21];
                    args_pair.extend_from_slice(&args);
                    if name_first {
                        packet.extend_from_slice(&name_pair);
                        packet.extend_from_slice(&args_pair);
                    } else {
                        packet.extend_from_slice(&args_pair);
                        packet.extend_from_slice(&name_pair);
                    }
                    for (at, byte) in flips {
                        let at = at % packet.len();
                        packet[at] = byte;
                    }
                    match cut % 8 {
                        0 | 4 => packet.truncate(cut / 8 % (packet.len() + 1)),
                        // Trailing bytes: a whole value, or the start of one.
                        1 => packet.push(0x07),
                        2 => packet.push(0xa3),
                        _ => {}
                    }
                    packet
                },
            )
    }

    /// A packet the general decoder refused and the crud decoder took: only a call whose
    /// arguments end the packet, unmeasured and torn. Planning it answers the general
    /// decoder's reply, byte for byte.
    fn torn_call_answers_as_refused(
        (header, request): &(crate::protocol::header::Header, Request<'_>),
        refused: &crate::protocol::header::PacketError,
    ) -> Result<(), TestCaseError> {
        let Request::Call(call) = request else {
            return Err(TestCaseError::fail(format!(
                "took a packet that is no call: {request:?}"
            )));
        };
        prop_assert!(fast_call::is_torn(call.args), "{:02x?}", call.args);
        prop_assert_eq!(refused.sync, header.sync);
        prop_assert_eq!(&refused.error, &fast_call::torn_args_error());
        let raised = plan(&engine(), &config(), call.function_name, call.args)
            .expect_err("torn arguments are refused");
        let mut from_plan = Vec::new();
        encode_reply(&mut from_plan, header.sync, 1, &CrudReply::Raised(raised));
        let mut from_decoder = Vec::new();
        reply::encode_protocol_error(&mut from_decoder, refused.sync, 1, &refused.error);
        prop_assert_eq!(from_plan, from_decoder);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn call_decoder_agrees_with_the_general_one(packet in packet()) {
            let general = decode_packet_general(&packet);
            let fast = fast_call::decode_packet(&packet);
            let direct = fast_call::decode_crud_call(&packet);
            match &general {
                Ok(_) => {
                    prop_assert_eq!(&fast, &general);
                    if let Some(decoded) = direct {
                        prop_assert_eq!(Ok(decoded), general);
                    }
                }
                Err(refused) => {
                    for taken in [fast.ok(), direct].into_iter().flatten() {
                        torn_call_answers_as_refused(&taken, refused)?;
                    }
                }
            }
        }

        #[test]
        fn call_decoder_agrees_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            for packet in [
                bytes.clone(),
                [&[0x82, 0x00, 0x0a, 0x01, 0x07][..], &bytes].concat(),
                [&[0x82, 0x00, 0x0a, 0x01, 0x07, 0x82, 0x22, 0xa8][..], b"crud.get", &bytes].concat(),
            ] {
                let general = decode_packet_general(&packet);
                match (&general, fast_call::decode_packet(&packet)) {
                    (Err(refused), Ok(taken)) => torn_call_answers_as_refused(&taken, refused)?,
                    (_, fast) => prop_assert_eq!(fast, general),
                }
            }
        }

        #[test]
        fn point_planner_agrees_with_the_general_one(
            function in function(),
            args in args(),
            damage in 0usize..64,
        ) {
            let engine = engine();
            let config = config();
            // Sometimes torn or followed by a byte, as the decoder may leave them.
            let mut args = args;
            match damage % 4 {
                0 => args.truncate(damage / 4 % (args.len() + 1)),
                1 => args.push(0xc0),
                _ => {}
            }
            let general = plan_general(&engine, &config, function, &args);
            prop_assert_eq!(plan(&engine, &config, function, &args), general.clone());
            if let Some(func) = Func::from_name(function) {
                if let Some(point) = fast_plan::plan_point(&engine, &config, func, &args) {
                    prop_assert_eq!(Ok(Plan::Point(point)), general);
                }
            }
        }
    }

    /// The shapes the connectors send take the one-pass paths (or the benchmark would
    /// time the general ones).
    #[test]
    fn connector_shapes_take_the_fast_paths() {
        let engine = engine();
        let config = config();
        for (function, args) in [
            ("crud.insert", r#"["customers", [1, null, "a"], {}]"#),
            ("crud.replace", r#"["customers", [1, null, "a"]]"#),
            (
                "crud.upsert",
                r#"["customers", [1, null, "a"], [["+", 4, 1]], {}]"#,
            ),
            (
                "crud.update",
                r#"["customers", 1, [["=", "name", "b"]], {}]"#,
            ),
            ("crud.delete", r#"["customers", [1], null]"#),
            ("crud.get", r#"["pages", 1, []]"#),
        ] {
            let args = json(args);
            let mut packet = Vec::new();
            client::encode_call(&mut packet, 9, function, &args);
            let decoded = fast_call::decode_crud_call(&packet[5..]);
            assert!(decoded.is_some(), "{function} decoded the general way");
            let func = Func::from_name(function).unwrap();
            let point = fast_plan::plan_point(&engine, &config, func, &args);
            assert!(point.is_some(), "{function} planned the general way");
        }
    }

    #[test]
    fn every_function_is_named_by_its_name() {
        for func in Func::ALL {
            assert_eq!(Func::from_name(func.name()), Some(func));
            assert_eq!(Func::from_name_bytes(func.name().as_bytes()), Some(func));
        }
        assert_eq!(Func::from_name("crud.nope"), None);
        assert_eq!(Func::from_name("insert"), None);
        assert_eq!(Func::from_name("crud."), None);
        assert_eq!(Func::from_name(""), None);
    }

    #[test]
    fn a_name_one_byte_off_names_no_function() {
        for func in Func::ALL {
            let name = func.name().as_bytes();
            for at in 0..name.len() {
                let mut changed = name.to_vec();
                changed[at] ^= 0x20;
                assert_eq!(Func::from_name_bytes(&changed), None, "{changed:?}");
                let mut shorter = name.to_vec();
                shorter.remove(at);
                assert_eq!(Func::from_name_bytes(&shorter), None, "{shorter:?}");
            }
            assert_eq!(Func::from_name_bytes(&[name, b"s"].concat()), None);
        }
    }
}

const READ_ONLY: &str = "Can't modify data because this instance is in read-only mode.";

/// The plan of a call, refused as a read-only instance refuses it (`None`: not a write).
fn refused_read_only(engine: &Engine, function: &str, args: &str) -> Option<CrudReply> {
    let args = json(args);
    let plan = plan(engine, &config(), function, &args).expect("planned");
    refuse_writes(engine, &config(), &plan, ErrorCode::ER_READONLY, READ_ONLY)
}

fn refused_values(engine: &Engine, function: &str, args: &str) -> String {
    match refused_read_only(engine, function, args) {
        Some(CrudReply::Values(values)) => msgpack_to_text(&without_sites(&values)),
        other => panic!("{function} {args}: {other:?}"),
    }
}

/// An engine whose customers hold `[1, 5, "A"]`.
fn engine_with_one_customer() -> Engine {
    let mut engine = engine();
    call(&mut engine, "crud.insert", r#"["customers", [1, 5, "A"]]"#);
    engine
}

#[test]
fn point_writes_refused_as_read_only_are_their_op_errors_with_the_box_error_inside() {
    let engine = engine_with_one_customer();
    for (function, args, class, verb) in [
        (
            "crud.insert",
            r#"["customers", [2, 5, "B"]]"#,
            "InsertError",
            "insert",
        ),
        (
            "crud.insert_object",
            r#"["customers", {"id": 2, "name": "B"}]"#,
            "InsertError",
            "insert",
        ),
        (
            "crud.replace",
            r#"["customers", [1, 5, "B"], {"noreturn": true}]"#,
            "ReplaceError",
            "replace",
        ),
        (
            "crud.update",
            r#"["customers", 1, [["=", "name", "Z"]]]"#,
            "UpdateError",
            "update",
        ),
        (
            "crud.upsert",
            r#"["customers", [1, 5, "A"], [["=", "name", "Z"]]]"#,
            "UpsertError",
            "upsert",
        ),
        (
            "crud.delete",
            r#"["customers", 99]"#,
            "DeleteError",
            "delete",
        ),
    ] {
        assert_eq!(
            refused_values(&engine, function, args),
            err(class, &format!("Failed to {verb}: {READ_ONLY}")),
            "{function}"
        );
    }
}

#[test]
fn batches_and_truncate_refused_as_read_only_fail_on_their_storage() {
    let engine = engine_with_one_customer();
    // Every op of a batch fails on its storage; with stop_on_error, the rest is not performed.
    let batch = r#"["customers", [[2, 5, "B"], [3, 5, "C"]]"#;
    assert_eq!(
        refused_values(&engine, "crud.insert_many", &format!("{batch}, {{}}]")),
        format!(
            "[null, [{}, {}]]",
            call_error(READ_ONLY, r#"[2, 5, "B"]"#),
            call_error(READ_ONLY, r#"[3, 5, "C"]"#)
        )
    );
    assert_eq!(
        refused_values(
            &engine,
            "crud.replace_many",
            &format!(r#"{batch}, {{"stop_on_error": true}}]"#)
        ),
        format!(
            "[null, [{}, {}]]",
            call_error(READ_ONLY, r#"[2, 5, "B"]"#),
            call_error("Operation with tuple was not performed", r#"[3, 5, "C"]"#)
        )
    );
    assert_eq!(
        refused_values(&engine, "crud.truncate", r#"["customers"]"#),
        err(
            "TruncateError",
            &format!("Failed to truncate: CallError: Failed for {UUID}: Function returned an error: {READ_ONLY}")
        )
    );
}

#[test]
fn box_space_writes_refused_as_read_only_raise_the_box_error_and_reads_pass() {
    let engine = engine_with_one_customer();
    // box.space's writes raise the box error itself.
    for (function, args) in [
        ("box.space.customers:insert", r#"[[2, 5, "B"]]"#),
        ("box.space.customers:delete", "[[1]]"),
        ("box.space.customers:truncate", "[]"),
    ] {
        assert_eq!(
            refused_read_only(&engine, function, args),
            Some(CrudReply::Raised(Raised {
                code: ErrorCode::ER_READONLY,
                message: READ_ONLY.into(),
            })),
            "{function}"
        );
    }
    // Reads are not refused.
    for (function, args) in [
        ("crud.get", r#"["customers", 1]"#),
        ("crud.select", r#"["customers", null]"#),
        ("crud.count", r#"["customers", null]"#),
        ("crud.len", r#"["customers"]"#),
        ("crud.min", r#"["customers", null]"#),
        ("box.space.customers:get", "[[1]]"),
        ("box.space.customers:select", "[[]]"),
        ("box.space.customers:len", "[]"),
    ] {
        assert_eq!(
            refused_read_only(&engine, function, args),
            None,
            "{function}"
        );
    }
}
