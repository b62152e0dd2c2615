//! Unit tests: one or more per op and per error, with exact bytes and messages. Expected
//! values marked [2.6] were observed on a live Tarantool 2.6 (Lua, 1-based).

use super::UpdateOps;
use crate::msgpack::{write_array_len, write_f32, write_f64, write_int, write_str, write_uint};
use crate::storage::error::StorageError;

/// A msgpack value for building test input.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TestValue {
    Nil,
    U(u64),
    /// Encoded with an int format even when non-negative (0xd3), to test format-byte typing.
    IFmt(i64),
    I(i64),
    F32(f32),
    F64(f64),
    S(String),
    A(Vec<TestValue>),
    Bool(bool),
    Dec,
    /// Msgpack bytes as they are.
    Raw(Vec<u8>),
}

pub(super) fn s(text: &str) -> TestValue {
    TestValue::S(text.to_string())
}

pub(super) fn encode_into(out: &mut Vec<u8>, value: &TestValue) {
    match value {
        TestValue::Nil => out.push(0xc0),
        TestValue::U(n) => write_uint(out, *n),
        TestValue::IFmt(n) => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
        TestValue::I(n) => write_int(out, *n),
        TestValue::F32(x) => write_f32(out, *x),
        TestValue::F64(x) => write_f64(out, *x),
        TestValue::S(text) => write_str(out, text.as_bytes()),
        TestValue::A(items) => {
            write_array_len(out, items.len() as u32);
            for item in items {
                encode_into(out, item);
            }
        }
        TestValue::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        // decimal 1: d5 01 00 1c
        TestValue::Dec => out.extend_from_slice(&[0xd5, 0x01, 0x00, 0x1c]),
        TestValue::Raw(bytes) => out.extend_from_slice(bytes),
    }
}

pub(super) fn enc(value: &TestValue) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, value);
    out
}

pub(super) fn names(name: &str) -> Option<u32> {
    match name {
        "id" => Some(0),
        "v" => Some(1),
        "w" => Some(2),
        "a.b" => Some(1),
        _ => None,
    }
}

/// Runs `ops` (wire base 0) on `tuple`; the new tuple bytes or the error message.
/// Every list also runs on the update tree (the engine of nested paths), which must agree
/// with the flat engine on ops that stay at the top level.
fn run_base(base: u32, tuple: &TestValue, ops: &TestValue) -> Result<Vec<u8>, String> {
    run_engines(base, &enc(tuple), ops, &[])
}

fn run_engines(
    base: u32,
    tuple: &[u8],
    ops: &TestValue,
    double_fields: &[bool],
) -> Result<Vec<u8>, String> {
    let ops_bytes = enc(ops);
    let decoded = UpdateOps::decode(&ops_bytes, base, &names).map_err(|e| e.to_string())?;
    let mut on_tree = decoded.clone();
    on_tree.nested = true;
    let mut tree_out = Vec::new();
    let tree_result = on_tree
        .apply(tuple, &mut tree_out, double_fields)
        .map(|()| tree_out)
        .map_err(|e| e.to_string());
    if decoded.nested {
        return tree_result;
    }
    let mut out = Vec::new();
    let result = decoded
        .apply(tuple, &mut out, double_fields)
        .map(|()| out)
        .map_err(|e| e.to_string());
    assert_eq!(result, tree_result, "flat and tree engines differ");
    result
}

fn run(tuple: &TestValue, ops: &TestValue) -> Result<Vec<u8>, String> {
    run_base(0, tuple, ops)
}

fn op(name: &str, field: TestValue, args: &[TestValue]) -> TestValue {
    let mut items = vec![s(name), field];
    items.extend_from_slice(args);
    TestValue::A(items)
}

fn ops(list: &[TestValue]) -> TestValue {
    TestValue::A(list.to_vec())
}

fn t(items: &[TestValue]) -> TestValue {
    TestValue::A(items.to_vec())
}

fn ok(items: &[TestValue]) -> Result<Vec<u8>, String> {
    Ok(enc(&t(items)))
}

fn err(message: &str) -> Result<Vec<u8>, String> {
    Err(message.to_string())
}

use TestValue::{F32, F64, I, U};

// ---------------------------------------------------------------- `=`

#[test]
fn set_replaces_appends_and_counts_from_end() {
    let tuple = t(&[U(1), U(5)]);
    assert_eq!(
        run(&tuple, &ops(&[op("=", U(1), &[s("x")])])),
        ok(&[U(1), s("x")])
    );
    // Field == count appends [2.6: {'=', 3, 7} on {1, 5}].
    assert_eq!(
        run(&tuple, &ops(&[op("=", U(2), &[U(7)])])),
        ok(&[U(1), U(5), U(7)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", I(-1), &[U(7)])])),
        ok(&[U(1), U(7)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", I(-2), &[U(7)])])),
        ok(&[U(7), U(5)])
    );
    // The value is stored verbatim, containers included.
    assert_eq!(
        run(
            &tuple,
            &ops(&[op(
                "=",
                U(1),
                &[t(&[TestValue::Nil, TestValue::Bool(true)])]
            )])
        ),
        ok(&[U(1), t(&[TestValue::Nil, TestValue::Bool(true)])])
    );
    // Two `=` on one field: the last wins.
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("=", U(1), &[U(1)]), op("=", U(1), &[U(2)])])
        ),
        ok(&[U(1), U(2)])
    );
}

#[test]
fn set_out_of_range_is_37() {
    let tuple = t(&[U(1), U(5)]);
    // 0-based 10 prints as 11; negative prints as sent [2.6: Field -3 for {'=', -3, 7}].
    assert_eq!(
        run(&tuple, &ops(&[op("=", U(10), &[U(7)])])),
        err("Field 11 was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", I(-3), &[U(7)])])),
        err("Field -3 was not found in the tuple")
    );
}

#[test]
fn index_base_one_shifts_numbers_but_not_negatives() {
    let tuple = t(&[U(1), U(5)]);
    assert_eq!(
        run_base(1, &tuple, &ops(&[op("=", U(2), &[U(9)])])),
        ok(&[U(1), U(9)])
    );
    assert_eq!(
        run_base(1, &tuple, &ops(&[op("=", I(-1), &[U(9)])])),
        ok(&[U(1), U(9)])
    );
    // [2.6: {'+', 0, 1}]
    assert_eq!(
        run_base(1, &tuple, &ops(&[op("+", U(0), &[U(1)])])),
        err("Field 0 was not found in the tuple")
    );
    assert_eq!(
        run_base(1, &tuple, &ops(&[op("=", U(4), &[U(9)])])),
        err("Field 4 was not found in the tuple")
    );
}

// ---------------------------------------------------------------- `!`

#[test]
fn index_base_is_a_signed_32_bit_number() {
    // [2.6, 2026-12-02: kv [1, 1, "abc"], INDEX_BASE 0xffffffff, ['=', 0, "zz"] ⇒ 23 on
    // field 2; INDEX_BASE 0x80000000, ['=', 0, ..] ⇒ 37 "Field 0 was not found"]
    let tuple = t(&[U(1), U(1), s("abc")]);
    assert_eq!(
        run_base(u32::MAX, &tuple, &ops(&[op("=", U(0), &[s("zz")])])),
        ok(&[U(1), s("zz"), s("abc")])
    );
    assert_eq!(
        run_base(0x8000_0000, &tuple, &ops(&[op("=", U(0), &[s("ww")])])),
        err("Field 0 was not found in the tuple")
    );
    assert_eq!(
        run_base(0x8000_0000, &tuple, &ops(&[op("=", U(5), &[s("ww")])])),
        err("Field 5 was not found in the tuple")
    );
}

#[test]
fn insert_before_position_and_at_ends() {
    let tuple = t(&[U(1), U(5)]);
    assert_eq!(
        run(&tuple, &ops(&[op("!", U(1), &[U(7)])])),
        ok(&[U(1), U(7), U(5)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("!", U(2), &[U(7)])])),
        ok(&[U(1), U(5), U(7)])
    );
    // [2.6: {'!', -1, 7} on {1, 5} ⇒ {1, 5, 7}]
    assert_eq!(
        run(&tuple, &ops(&[op("!", I(-1), &[U(7)])])),
        ok(&[U(1), U(5), U(7)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("!", I(-3), &[U(7)])])),
        ok(&[U(7), U(1), U(5)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("!", U(0), &[U(7)])])),
        ok(&[U(7), U(1), U(5)])
    );
}

#[test]
fn insert_out_of_range_is_37() {
    let tuple = t(&[U(1), U(5)]);
    // [2.6: {'!', 4, 1} ⇒ Field 4; {'!', -4, 1} ⇒ Field -4]
    assert_eq!(
        run(&tuple, &ops(&[op("!", U(3), &[U(7)])])),
        err("Field 4 was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("!", I(-4), &[U(7)])])),
        err("Field -4 was not found in the tuple")
    );
}

// ---------------------------------------------------------------- `#`

#[test]
fn delete_counts_and_clips() {
    let tuple = t(&[U(1), U(5), U(6), U(7)]);
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(1), &[U(2)])])),
        ok(&[U(1), U(7)])
    );
    // [2.6: {'#', -2, 5} on {1, 5, 6, 7} ⇒ {1, 5}]
    assert_eq!(
        run(&tuple, &ops(&[op("#", I(-2), &[U(5)])])),
        ok(&[U(1), U(5)])
    );
    assert_eq!(run(&tuple, &ops(&[op("#", U(0), &[U(u64::MAX)])])), ok(&[]));
}

#[test]
fn delete_errors() {
    let tuple = t(&[U(1), U(5)]);
    // [2.6] decode-time, so a negative field prints as sent.
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(1), &[U(0)])])),
        err("Field 2 UPDATE error: cannot delete 0 fields")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", I(-1), &[U(0)])])),
        err("Field -1 UPDATE error: cannot delete 0 fields")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(2), &[U(1)])])),
        err("Field 3 was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", I(-3), &[U(1)])])),
        err("Field -3 was not found in the tuple")
    );
    // [2.6: count -1 and 'a']
    for bad in [I(-1), s("a"), TestValue::IFmt(1)] {
        assert_eq!(
            run(&tuple, &ops(&[op("#", U(1), &[bad])])),
            err("Argument type in operation '#' on field 2 does not match field type: expected a positive integer")
        );
    }
}

#[test]
fn delete_keeps_the_low_32_bits_of_its_count() {
    // [2.6, 2026-12-02: `#` with 2^32 ⇒ 29 "cannot delete 0 fields"; with 2^32 + 1 it
    // deletes one field] Tarantool reads the count into a uint32_t.
    let tuple = t(&[U(1), U(5), U(6), U(7)]);
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(1), &[U(1 << 32)])])),
        err("Field 2 UPDATE error: cannot delete 0 fields")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(1), &[U((1 << 32) + 1)])])),
        ok(&[U(1), U(6), U(7)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", U(1), &[U((5 << 32) + 2)])])),
        ok(&[U(1), U(7)])
    );
}

// ---------------------------------------------------------------- `+` `-`

#[test]
fn integer_arithmetic() {
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("+", U(1), &[U(3)])])),
        ok(&[U(1), U(8)])
    );
    // [2.6: {'-', 2, 10} on {1, 5} ⇒ 0xfb]
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("-", U(1), &[U(10)])])),
        Ok(vec![0x92, 0x01, 0xfb])
    );
    // A non-negative result is stored as uint even from int-format inputs.
    assert_eq!(
        run(
            &t(&[U(1), TestValue::IFmt(5)]),
            &ops(&[op("+", U(1), &[TestValue::IFmt(0)])])
        ),
        Ok(vec![0x92, 0x01, 0x05])
    );
    // [2.6: u64::MAX + -1]
    assert_eq!(
        run(&t(&[U(1), U(u64::MAX)]), &ops(&[op("+", U(1), &[I(-1)])])),
        ok(&[U(1), U(u64::MAX - 1)])
    );
    // [2.6: -5 - 9223372036854775803 ⇒ d3 80 00 ..]
    assert_eq!(
        run(
            &t(&[U(1), I(-5)]),
            &ops(&[op("-", U(1), &[U(9223372036854775803)])])
        ),
        ok(&[U(1), I(i64::MIN)])
    );
    // Crossing from the negative range into u64 range is fine.
    assert_eq!(
        run(
            &t(&[U(1), I(i64::MIN)]),
            &ops(&[op("-", U(1), &[I(i64::MIN)])])
        ),
        ok(&[U(1), U(0)])
    );
}

#[test]
fn integer_overflow_is_95() {
    // [2.6]
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("+", U(1), &[U(u64::MAX)])])),
        err("Integer overflow when performing '+' operation on field 2")
    );
    assert_eq!(
        run(
            &t(&[U(1), I(-5)]),
            &ops(&[op("-", U(1), &[U(i64::MAX as u64)])])
        ),
        err("Integer overflow when performing '-' operation on field 2")
    );
    assert_eq!(
        run(&t(&[U(1), U(2), U(0)]), &ops(&[op("-", I(-1), &[U(1)])])).map(|_| ()),
        Ok(())
    );
    // A negative field number prints resolved, 1-based.
    assert_eq!(
        run(
            &t(&[U(1), U(2), I(i64::MIN)]),
            &ops(&[op("-", I(-1), &[U(1)])])
        ),
        err("Integer overflow when performing '-' operation on field 3")
    );
}

#[test]
fn float_arithmetic_narrows_to_float_when_exact() {
    // [2.6: 1 + 1.5 (double) ⇒ ca 40 20 00 00]
    assert_eq!(
        run(&t(&[U(1), U(1)]), &ops(&[op("+", U(1), &[F64(1.5)])])),
        Ok(vec![0x92, 0x01, 0xca, 0x40, 0x20, 0x00, 0x00])
    );
    // [2.6: 1 + 1.1 (double) ⇒ cb 40 00 cc cc cc cc cc cd]
    assert_eq!(
        run(&t(&[U(1), U(1)]), &ops(&[op("+", U(1), &[F64(1.1)])])),
        Ok(vec![
            0x92, 0x01, 0xcb, 0x40, 0x00, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcd
        ])
    );
    // [2.6: float 1.1 + float 1.1 ⇒ ca 40 0c cc cd]
    assert_eq!(
        run(&t(&[U(1), F32(1.1)]), &ops(&[op("+", U(1), &[F32(1.1)])])),
        Ok(vec![0x92, 0x01, 0xca, 0x40, 0x0c, 0xcc, 0xcd])
    );
    // [2.6: float 1.5 + double 1.1 ⇒ cb 40 04 cc cc cc cc cc cd]
    assert_eq!(
        run(&t(&[U(1), F32(1.5)]), &ops(&[op("+", U(1), &[F64(1.1)])])),
        Ok(vec![
            0x92, 0x01, 0xcb, 0x40, 0x04, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcd
        ])
    );
    // [2.6: 5 - NaN ⇒ cb ff f8 00 ..]; we compare NaN by type, not bits.
    let out = run(&t(&[U(1), U(5)]), &ops(&[op("-", U(1), &[F64(f64::NAN)])]));
    let out = out.expect("NaN arithmetic succeeds");
    assert_eq!(out[..3], [0x92, 0x01, 0xcb]);
    assert!(f64::from_be_bytes(out[3..11].try_into().expect("8 bytes")).is_nan());
    assert_eq!(
        run(&t(&[U(1), F64(2.5)]), &ops(&[op("-", U(1), &[I(-3)])])),
        ok(&[U(1), F32(5.5)])
    );
}

/// Runs `ops` on `tuple` with the fields of `double_fields` typed `double`; the raw bytes.
fn run_typed(
    tuple: &TestValue,
    ops: &TestValue,
    double_fields: &[bool],
) -> Result<Vec<u8>, String> {
    run_engines(0, &enc(tuple), ops, double_fields)
}

/// The bytes of field 1 of a two-field result `[1, x]`.
fn second_field(out: Result<Vec<u8>, String>) -> Vec<u8> {
    let out = out.expect("the update applies");
    assert_eq!(out[..2], [0x92, 0x01]);
    out[2..].to_vec()
}

fn f64_bits(bits: u64) -> TestValue {
    F64(f64::from_bits(bits))
}

#[test]
fn float_results_beyond_float32_range_stay_doubles() {
    // [2.6, 2026-12-02, field of type number: 2.5 + inf ⇒ cb 7f f0 ..; 2.5 - inf ⇒
    // cb ff f0 ..; 2.5 + 1e300 ⇒ cb; 2.5 + f32::MAX ⇒ ca 7f 7f ff ff]
    let field = t(&[U(1), F64(2.5)]);
    let plus = |arg: TestValue| second_field(run(&field, &ops(&[op("+", U(1), &[arg])])));
    let minus = |arg: TestValue| second_field(run(&field, &ops(&[op("-", U(1), &[arg])])));
    assert_eq!(plus(F64(f64::INFINITY)), enc(&F64(f64::INFINITY)));
    assert_eq!(minus(F64(f64::INFINITY)), enc(&F64(f64::NEG_INFINITY)));
    assert_eq!(plus(F32(f32::INFINITY)), enc(&F64(f64::INFINITY)));
    assert_eq!(plus(F64(1e300)), enc(&F64(1e300 + 2.5)));
    assert_eq!(
        second_field(run(
            &t(&[U(1), U(0)]),
            &ops(&[op("+", U(1), &[F64(f64::from(f32::MAX))])])
        )),
        vec![0xca, 0x7f, 0x7f, 0xff, 0xff]
    );
    // [2.6: float 3e38 + float 3e38 ⇒ cb 47 fc 36 3c c0 00 00 00]: computed in double.
    assert_eq!(
        second_field(run(
            &t(&[U(1), F32(3e38)]),
            &ops(&[op("+", U(1), &[F32(3e38)])])
        )),
        vec![0xcb, 0x47, 0xfc, 0x36, 0x3c, 0xc0, 0x00, 0x00, 0x00]
    );
    // [2.6: -0.0 + -0.0 ⇒ ca 80 00 00 00; 0.0 - 0.0 ⇒ ca 00 00 00 00]
    assert_eq!(
        second_field(run(
            &t(&[U(1), F64(-0.0)]),
            &ops(&[op("+", U(1), &[F64(-0.0)])])
        )),
        vec![0xca, 0x80, 0x00, 0x00, 0x00]
    );
}

#[test]
fn nan_results_keep_the_nan_operand_as_x86_tarantool_does() {
    // Every expected value observed on Tarantool 2.6 (x86-64), 2026-12-02.
    let on = |field: TestValue, opcode: &str, arg: TestValue| {
        second_field(run(&t(&[U(1), field]), &ops(&[op(opcode, U(1), &[arg])])))
    };
    let bits = |out: Vec<u8>| {
        assert_eq!(out[0], 0xcb, "a NaN result is a double");
        u64::from_be_bytes(out[1..9].try_into().expect("8 bytes"))
    };
    // x - NaN is that NaN, not its negation.
    assert_eq!(
        bits(on(F64(1.5), "-", f64_bits(0x7ff8_0000_0000_0001))),
        0x7ff8_0000_0000_0001
    );
    assert_eq!(
        bits(on(F64(1.5), "-", f64_bits(0xfff8_0000_0000_0001))),
        0xfff8_0000_0000_0001
    );
    // Both NaN: the field's wins.
    assert_eq!(
        bits(on(
            f64_bits(0x7ff8_0000_0000_0001),
            "-",
            f64_bits(0xfff8_0000_0000_0002)
        )),
        0x7ff8_0000_0000_0001
    );
    assert_eq!(
        bits(on(
            f64_bits(0xfff8_0000_0000_0001),
            "+",
            f64_bits(0x7ff8_0000_0000_0002)
        )),
        0xfff8_0000_0000_0001
    );
    // A signalling NaN comes out quiet.
    assert_eq!(
        bits(on(f64_bits(0x7ff0_0000_0000_0001), "+", U(1))),
        0x7ff8_0000_0000_0001
    );
    assert_eq!(
        bits(on(F64(1.5), "+", f64_bits(0x7ff0_0000_0000_0001))),
        0x7ff8_0000_0000_0001
    );
    // A float32 NaN widens with its payload on top.
    assert_eq!(
        bits(on(F64(1.5), "-", F32(f32::from_bits(0x7f80_0001)))),
        0x7ff8_0000_2000_0000
    );
    assert_eq!(
        bits(on(F64(1.5), "-", F32(f32::from_bits(0xffc0_0001)))),
        0xfff8_0000_2000_0000
    );
    assert_eq!(
        bits(on(F32(f32::from_bits(0x7fc0_0003)), "+", U(1))),
        0x7ff8_0000_6000_0000
    );
    // inf - inf: the default NaN, negative.
    assert_eq!(
        bits(on(F64(f64::INFINITY), "-", F64(f64::INFINITY))),
        0xfff8_0000_0000_0000
    );
    assert_eq!(
        bits(on(F64(f64::NEG_INFINITY), "-", F64(f64::NEG_INFINITY))),
        0xfff8_0000_0000_0000
    );
}

#[test]
fn float_results_in_double_fields_are_written_as_doubles() {
    // [2.6, 2026-12-02, space format {unsigned, double, number}: tuple [1, 1.5, 2.5]]
    let tuple = t(&[U(1), F64(1.5), F64(2.5)]);
    let doubles = [false, true, false];
    // d + 1 ⇒ cb 40 04 ..; d + float 1.0 ⇒ the same; d - 1.5 ⇒ cb 00 ..
    for arg in [U(1), F32(1.0)] {
        assert_eq!(
            run_typed(&tuple, &ops(&[op("+", U(1), &[arg])]), &doubles),
            ok(&[U(1), F64(2.5), F64(2.5)])
        );
    }
    assert_eq!(
        run_typed(&tuple, &ops(&[op("-", U(1), &[F64(1.5)])]), &doubles),
        ok(&[U(1), F64(0.0), F64(2.5)])
    );
    // The number field keeps the float32: n + 1 ⇒ ca 40 60 00 00
    assert_eq!(
        run_typed(&tuple, &ops(&[op("+", U(2), &[U(1)])]), &doubles),
        ok(&[U(1), F64(1.5), F32(3.5)])
    );
    // Where the result lands decides, not where it was computed: y + 1, then `#` of x
    // moves it into the double field ⇒ [1, cb 3.5]; x + 1, then `!` before it moves it
    // into the number field ⇒ [1, cb 7.0, ca 2.5, cb 2.5].
    assert_eq!(
        run_typed(
            &tuple,
            &ops(&[op("+", U(2), &[U(1)]), op("#", U(1), &[U(1)])]),
            &doubles
        ),
        ok(&[U(1), F64(3.5)])
    );
    assert_eq!(
        run_typed(
            &tuple,
            &ops(&[op("+", U(1), &[U(1)]), op("!", U(1), &[F64(7.0)])]),
            &doubles
        ),
        ok(&[U(1), F64(7.0), F32(2.5), F64(2.5)])
    );
    // An integer result stays an integer (the format then refuses it, not the update).
    assert_eq!(
        run_typed(&t(&[U(1), U(2)]), &ops(&[op("+", U(1), &[U(1)])]), &doubles),
        ok(&[U(1), U(3)])
    );
}

#[test]
fn arithmetic_type_errors_are_26() {
    // [2.6] field not a number: execution time, field resolved.
    assert_eq!(
        run(&t(&[U(1), s("a")]), &ops(&[op("+", I(-1), &[U(1)])])),
        err("Argument type in operation '+' on field 2 does not match field type: expected a number")
    );
    // [2.6] argument not a number: decode time, negative field as sent.
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("+", I(-1), &[s("a")])])),
        err("Argument type in operation '+' on field -1 does not match field type: expected a number")
    );
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("-", U(1), &[TestValue::Nil])])),
        err("Argument type in operation '-' on field 2 does not match field type: expected a number")
    );
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn raw(text: &str) -> TestValue {
    TestValue::Raw(unhex(text))
}

/// Runs Lua-style ops (index base 1, as the [2.6] probes sent them) on the tuple given as
/// hex; the new tuple as hex or the error message.
fn lua(tuple_hex: &str, list: &[TestValue]) -> Result<String, String> {
    run_engines(1, &unhex(tuple_hex), &ops(list), &[]).map(|out| hex(&out))
}

fn lua_ok(hex_out: &str) -> Result<String, String> {
    Ok(hex_out.to_string())
}

fn lua_err(message: &str) -> Result<String, String> {
    Err(message.to_string())
}

#[test]
fn decimal_arithmetic_matches_tarantool() {
    // [2.6] each: tuple, op, new tuple (or error).
    // dec 1.10 + 1 = 2.10 (the scale stays).
    assert_eq!(
        lua("930100c7030102110c", &[op("+", U(3), &[U(1)])]),
        lua_ok("930100c7030102210c")
    );
    // dec 1 + 0.1 (a double, converted through its %.15g text) = 1.1.
    assert_eq!(
        lua("930100d501001c", &[op("+", U(3), &[F64(0.1)])]),
        lua_ok("930100c7030101011c")
    );
    // integer 6 + dec 0.1 = dec 6.1 (the format check then refuses it in an integer field).
    assert_eq!(
        lua("920106", &[op("+", U(2), &[raw("d501011c")])]),
        lua_ok("9201c7030101061c")
    );
    // dec 1 + 1 = 2: `d5 01 00 2c`, as the differential test saw.
    assert_eq!(
        lua("9201d501001c", &[op("+", U(2), &[U(1)])]),
        lua_ok("9201d501002c")
    );
    // 38 nines + 1 overflows.
    assert_eq!(
        lua(
            concat!("930100c7150100", "099999999999999999999999999999999999999c"),
            &[op("+", U(3), &[U(1)])]
        ),
        lua_err("Decimal overflow when performing operation '+' on field 3")
    );
    // 37 nines .9 + 1 rounds to 38 digits, half up.
    assert_eq!(
        lua(
            concat!("930100c7150101", "099999999999999999999999999999999999999c"),
            &[op("+", U(3), &[U(1)])]
        ),
        lua_ok("930100c7150100010000000000000000000000000000000000001c")
    );
    let not_convertible = "Argument type in operation '+' on field 3 does not match field type: \
                           expected a number convertible to decimal";
    for x in [f64::NAN, 1e300] {
        assert_eq!(
            lua("930100d501001c", &[op("+", U(3), &[F64(x)])]),
            lua_err(not_convertible)
        );
    }
    // 5e-324 becomes 0E-38; 1 + it has 39 digits, rounded to 38.
    assert_eq!(
        lua("930100d501001c", &[op("+", U(3), &[F64(5e-324)])]),
        lua_ok("930100c7150125010000000000000000000000000000000000000c")
    );
    // -1 + 1 = +0.
    assert_eq!(
        lua("930100d501001d", &[op("+", U(3), &[U(1)])]),
        lua_ok("930100d501000c")
    );
    // Inside a map: 2.50 - 0.5 = 2.00.
    assert_eq!(
        lua(
            "920181a161c7030102250c",
            &[op("-", s("[2].a"), &[raw("d501015c")])]
        ),
        lua_ok("920181a161c7030102200c")
    );
    // A decimal that does not unpack is no number.
    assert_eq!(
        lua("920101", &[op("+", U(2), &[raw("d50100ac")])]),
        lua_err("Argument type in operation '+' on field 2 does not match field type: expected a number")
    );
}

// ---------------------------------------------------------------- `&` `|` `^`

#[test]
fn bitwise_ops() {
    let tuple = t(&[U(1), U(0b1100)]);
    assert_eq!(
        run(&tuple, &ops(&[op("&", U(1), &[U(0b1010)])])),
        ok(&[U(1), U(0b1000)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("|", U(1), &[U(0b1010)])])),
        ok(&[U(1), U(0b1110)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("^", U(1), &[U(0b1010)])])),
        ok(&[U(1), U(0b0110)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("|", U(1), &[U(u64::MAX)])])),
        ok(&[U(1), U(u64::MAX)])
    );
}

#[test]
fn bitwise_type_errors_are_26() {
    let expected =
        "Argument type in operation '&' on field 2 does not match field type: expected a positive integer";
    // [2.6] argument -1; field -5.
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("&", U(1), &[I(-1)])])),
        err(expected)
    );
    assert_eq!(
        run(&t(&[U(1), I(-5)]), &ops(&[op("&", U(1), &[U(1)])])),
        err(expected)
    );
    // MP_INT format holding a positive number is not MP_UINT.
    assert_eq!(
        run(
            &t(&[U(1), TestValue::IFmt(5)]),
            &ops(&[op("&", U(1), &[U(1)])])
        ),
        err(expected)
    );
    assert_eq!(
        run(
            &t(&[U(1), U(5)]),
            &ops(&[op("&", U(1), &[TestValue::IFmt(1)])])
        ),
        err(expected)
    );
    assert_eq!(
        run(&t(&[U(1), F64(1.0)]), &ops(&[op("&", U(1), &[U(1)])])),
        err(expected)
    );
}

// ---------------------------------------------------------------- `:`

fn splice(offset: TestValue, length: TestValue, paste: &str) -> TestValue {
    ops(&[op(":", U(1), &[offset, length, s(paste)])])
}

#[test]
fn splice_spec_examples() {
    let hello = t(&[U(1), s("hello")]);
    let cases: [(i64, i64, &str, &str); 6] = [
        (1, 2, "XY", "hXYlo"),
        (-1, 0, "!", "hello!"),
        (-2, 1, "!", "hell!"),
        (100, 1, "!", "hello!"),
        (0, -1, "!", "!o"),
        (0, 100, "!", "!"),
    ];
    for (offset, length, paste, expected) in cases {
        assert_eq!(
            run(&hello, &splice(I(offset), I(length), paste)),
            ok(&[U(1), s(expected)]),
            "splice({offset}, {length}, {paste:?})"
        );
    }
    // [2.6, Lua base 1: (1,-10,'!') and (-6,0,'!') ⇒ "!hello"]
    assert_eq!(
        run(&hello, &splice(I(0), I(-10), "!")),
        ok(&[U(1), s("!hello")])
    );
    assert_eq!(
        run(&hello, &splice(I(-6), I(0), "!")),
        ok(&[U(1), s("!hello")])
    );
    assert_eq!(
        run_base(1, &hello, &ops(&[op(":", U(2), &[U(1), I(-1), s("!")])])),
        ok(&[U(1), s("!o")])
    );
}

#[test]
fn splice_result_uses_the_shortest_string_header() {
    let long = "x".repeat(40);
    assert_eq!(
        run(
            &t(&[s("ab")]),
            &ops(&[op(":", U(0), &[U(1), U(0), s(&long)])])
        ),
        ok(&[s(&format!("a{long}b"))])
    );
}

#[test]
fn splice_errors() {
    let hello = t(&[U(1), s("hello")]);
    let bound = "SPLICE error on field 2: offset is out of bound";
    // [2.6] too negative (execution), and 0 with base 1 (decode).
    assert_eq!(run(&hello, &splice(I(-7), U(1), "x")), err(bound));
    assert_eq!(
        run_base(1, &hello, &ops(&[op(":", U(2), &[U(0), U(1), s("x")])])),
        err(bound)
    );
    // [2.6] non-string field, non-integer offset/length, non-string paste.
    assert_eq!(
        run(&t(&[U(1), U(5)]), &splice(U(1), U(1), "x")),
        err("Argument type in operation ':' on field 2 does not match field type: expected a string")
    );
    assert_eq!(
        run(&hello, &ops(&[op(":", U(1), &[U(1), F64(1.5), s("x")])])),
        err("Argument type in operation ':' on field 2 does not match field type: expected an integer")
    );
    assert_eq!(
        run(&hello, &ops(&[op(":", U(1), &[U(1u64 << 31), U(1), s("x")])])),
        err("Argument type in operation ':' on field 2 does not match field type: expected an integer")
    );
    assert_eq!(
        run(&hello, &ops(&[op(":", U(1), &[U(1), U(1), U(5)])])),
        err("Argument type in operation ':' on field 2 does not match field type: expected a string")
    );
}

// ---------------------------------------------------------------- sequencing

#[test]
fn ops_apply_in_order_on_the_evolving_tuple() {
    // [2.6: {'!',1,1},{'!',1,2},{'#',1,1},{'=',-1,9} on {1, 5} ⇒ {1, 1, 9}]
    assert_eq!(
        run_base(
            1,
            &t(&[U(1), U(5)]),
            &ops(&[
                op("!", U(1), &[U(1)]),
                op("!", U(1), &[U(2)]),
                op("#", U(1), &[U(1)]),
                op("=", I(-1), &[U(9)]),
            ])
        ),
        ok(&[U(1), U(1), U(9)])
    );
    // [2.6: {'+',2,1},{'#',2,1},{'+',2,1} on {1,5,6} ⇒ {1,7}]
    assert_eq!(
        run(
            &t(&[U(1), U(5), U(6)]),
            &ops(&[
                op("+", U(1), &[U(1)]),
                op("#", U(1), &[U(1)]),
                op("+", U(1), &[U(1)]),
            ])
        ),
        ok(&[U(1), U(7)])
    );
    // [2.6: '!' then '+' on the inserted field; '=' append then '+']
    assert_eq!(
        run(
            &t(&[U(1), U(5)]),
            &ops(&[op("!", U(2), &[U(1)]), op("+", U(2), &[U(1)])])
        ),
        ok(&[U(1), U(5), U(2)])
    );
    assert_eq!(
        run(
            &t(&[U(1), U(5)]),
            &ops(&[op("=", U(2), &[U(1)]), op("+", U(2), &[U(1)])])
        ),
        ok(&[U(1), U(5), U(2)])
    );
    // [2.6: '+' then '=' ⇒ the '=' wins]
    assert_eq!(
        run(
            &t(&[U(1), U(5)]),
            &ops(&[op("+", U(1), &[U(1)]), op("=", U(1), &[U(1)])])
        ),
        ok(&[U(1), U(1)])
    );
}

#[test]
fn second_non_set_op_on_a_changed_field_is_double_update() {
    let double = "Field 2 UPDATE error: double update of the same field";
    let tuple = t(&[U(1), U(5)]);
    // [2.6: '++', '=+', '+=+', '^|', '::']
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("+", U(1), &[U(1)]), op("+", U(1), &[U(1)])])
        ),
        err(double)
    );
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("=", U(1), &[U(1)]), op("-", U(1), &[U(1)])])
        ),
        err(double)
    );
    assert_eq!(
        run(
            &tuple,
            &ops(&[
                op("+", U(1), &[U(1)]),
                op("=", U(1), &[U(1)]),
                op("+", U(1), &[U(1)])
            ])
        ),
        err(double)
    );
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("^", U(1), &[U(1)]), op("|", U(1), &[U(1)])])
        ),
        err(double)
    );
    assert_eq!(
        run(
            &t(&[U(1), s("ab")]),
            &ops(&[
                op(":", U(1), &[U(1), U(0), s("x")]),
                op(":", U(1), &[U(1), U(0), s("y")])
            ])
        ),
        err(double)
    );
    // [2.6: {'+',3,1},{'+',-1,1} on {1,5,6} ⇒ Field 3]
    assert_eq!(
        run(
            &t(&[U(1), U(5), U(6)]),
            &ops(&[op("+", U(2), &[U(1)]), op("+", I(-1), &[U(1)])])
        ),
        err("Field 3 UPDATE error: double update of the same field")
    );
}

// ---------------------------------------------------------------- field ids

#[test]
fn field_by_name_and_by_path() {
    let tuple = t(&[U(1), U(5), U(6)]);
    assert_eq!(
        run(&tuple, &ops(&[op("=", s("v"), &[U(7)])])),
        ok(&[U(1), U(7), U(6)])
    );
    // [2.6: '[2]' is 1-based field 2]
    assert_eq!(
        run(&tuple, &ops(&[op("=", s("[2]"), &[U(7)])])),
        ok(&[U(1), U(7), U(6)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", s("[\"w\"]"), &[U(7)])])),
        ok(&[U(1), U(5), U(7)])
    );
    // A whole name wins over reading it as a path.
    assert_eq!(
        run(&tuple, &ops(&[op("=", s("a.b"), &[U(7)])])),
        ok(&[U(1), U(7), U(6)])
    );
    // Path indexes ignore the request's index base.
    assert_eq!(
        run_base(1, &tuple, &ops(&[op("=", s("[2]"), &[U(7)])])),
        ok(&[U(1), U(7), U(6)])
    );
}

#[test]
fn messages_quote_fields_addressed_by_string() {
    // [2.6]
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("+", s("[2]"), &[s("a")])])),
        err("Argument type in operation '+' on field '[2]' does not match field type: expected a number")
    );
    assert_eq!(
        run(&t(&[U(1), s("a")]), &ops(&[op("+", s("v"), &[U(1)])])),
        err("Argument type in operation '+' on field 'v' does not match field type: expected a number")
    );
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op(":", s("v"), &[U(1), U(1), s("x")])])),
        err("Argument type in operation ':' on field 'v' does not match field type: expected a string")
    );
}

#[test]
fn field_id_errors() {
    let tuple = t(&[U(1), U(5)]);
    // [2.6: beyond the tuple by path or name ⇒ 201 with the quoted path, quoted again]
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("[5]"), &[U(1)])])),
        err("Field ''[5]'' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("w"), &[U(1)])])),
        err("Field ''w'' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("foo"), &[U(1)])])),
        err("Field 'foo' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s(""), &[U(1)])])),
        err("Field '' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("zz.a"), &[U(1)])])),
        err("Field 'zz.a' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("[0]"), &[U(1)])])),
        err("Field '[0]' UPDATE error: invalid JSON in position 2")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", s("[2"), &[U(1)])])),
        err("Field '[2' UPDATE error: invalid JSON in position 3")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", TestValue::Bool(true), &[U(1)])])),
        err("Illegal parameters, field id must be a number or a string")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", F64(1.0), &[U(1)])])),
        err("Illegal parameters, field id must be a number or a string")
    );
    // Tarantool reads field ids as int32 [2.6 prints a stale field; we print the number].
    assert_eq!(
        run(&tuple, &ops(&[op("+", U(3_000_000_000), &[U(1)])])),
        err("Argument type in operation '+' on field 3000000000 does not match field type: expected an integer")
    );
}

#[test]
fn string_addressed_ops_across_all_kinds() {
    let tuple = t(&[U(1), U(5)]);
    // [2.6, each case]
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("+", s("v"), &[U(1)]), op("+", s("v"), &[U(1)])])
        ),
        err("Field 'v' UPDATE error: double update of the same field")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("=", s("[3]"), &[U(7)])])),
        ok(&[U(1), U(5), U(7)])
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", s("[3]"), &[U(1)])])),
        err("Field ''[3]'' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("!", s("[4]"), &[U(1)])])),
        err("Field ''[4]'' was not found in the tuple")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("#", s("v"), &[U(0)])])),
        err("Field 'v' UPDATE error: cannot delete 0 fields")
    );
}

// ---------------------------------------------------------------- nested JSON paths
//
// Every expected value here was observed on Tarantool 2.6 (Lua `space:update`), on the
// tuple given, unless marked [2.11] (2.6 crashes or fails there; the code follows 2.11).

#[test]
fn a_lone_path_op_patches_the_field_in_place() {
    // `=` on an existing key replaces it; on a new key inserts it after the map header.
    assert_eq!(
        lua("920181a16101", &[op("=", s("v.a"), &[U(5)])]),
        lua_ok("920181a16105")
    );
    assert_eq!(
        lua("920181a16101", &[op("=", s("v.b"), &[U(5)])]),
        lua_ok("920182a16205a16101")
    );
    assert_eq!(
        lua("920181a16181a16201", &[op("+", s("[2].a.b"), &[U(5)])]),
        lua_ok("920181a16181a16206")
    );
    // Arrays: `=` one past the end appends, `!` inserts before, `#` clips its count.
    let array = "920193010203";
    assert_eq!(
        lua(array, &[op("=", s("[2][4]"), &[U(5)])]),
        lua_ok("92019401020305")
    );
    assert_eq!(
        lua(array, &[op("!", s("[2][1]"), &[U(5)])]),
        lua_ok("92019405010203")
    );
    assert_eq!(
        lua(array, &[op("#", s("[2][2]"), &[U(5)])]),
        lua_ok("92019101")
    );
    // Scalars of every kind.
    assert_eq!(
        lua(
            "920181a173a568656c6c6f",
            &[op(":", s("v.s"), &[U(2), U(1), s("XY")])]
        ),
        lua_ok("920181a173a66858596c6c6f")
    );
    assert_eq!(
        lua("92019105", &[op("|", s("[2][1]"), &[U(2)])]),
        lua_ok("92019107")
    );
    // A float result inside a field stays a float32 (only top-level double fields widen).
    assert_eq!(
        lua("920191cb3ff8000000000000", &[op("+", s("[2][1]"), &[U(1)])]),
        lua_ok("920191ca40200000")
    );
}

#[test]
fn path_errors_name_the_whole_path() {
    let map = "920181a16101";
    // Not found at decode (the first step) prints the path as sent; later, quoted.
    assert_eq!(
        lua(map, &[op("+", s("s.a"), &[U(5)])]),
        lua_err("Field 's.a' was not found in the tuple")
    );
    assert_eq!(
        lua("920193010203", &[op("=", s("[2][5]"), &[U(5)])]),
        lua_err("Field ''[2][5]'' was not found in the tuple")
    );
    // The path's digits wrap in a C int: 1215752191 is no field.
    assert_eq!(
        lua("920193010203", &[op("=", s("[99999999999]"), &[U(5)])]),
        lua_err("Field ''[99999999999]'' was not found in the tuple")
    );
    assert_eq!(
        lua(map, &[op("!", s("v.a"), &[U(5)])]),
        lua_err("Field 'v.a' UPDATE error: the key exists already")
    );
    assert_eq!(
        lua(map, &[op("#", s("v.a"), &[U(2)])]),
        lua_err("Field 'v.a' UPDATE error: can delete only 1 field from a map in a row")
    );
    assert_eq!(
        lua("920193010203", &[op("=", s("[2].a"), &[U(5)])]),
        lua_err("Field '[2].a' UPDATE error: can not access by key a non-map field")
    );
    assert_eq!(
        lua(map, &[op("=", s("[2][1]"), &[U(5)])]),
        lua_err("Field '[2][1]' UPDATE error: can not access by index a non-array field")
    );
    assert_eq!(
        lua(map, &[op("=", s("[2]..a"), &[U(5)])]),
        lua_err("Field '[2]..a' UPDATE error: invalid JSON in position 5")
    );
    assert_eq!(
        lua(map, &[op("=", s("v.a b"), &[U(5)])]),
        lua_err("Field 'v.a b' UPDATE error: invalid JSON in position 4")
    );
    assert_eq!(
        lua(map, &[op("=", s("v[*]"), &[U(5)])]),
        lua_err("Field 'v[*]' UPDATE error: invalid JSON in position 3")
    );
    assert_eq!(
        lua(
            map,
            &[op("+", s("v.a"), &[U(1)]), op("+", s("v.a"), &[U(1)])]
        ),
        lua_err("Field 'v.a' UPDATE error: double update of the same field")
    );
}

#[test]
fn several_ops_in_one_field_reshape_it_as_tarantool() {
    // {y: 2, x: 1, a: {q: 2, p: 1}}
    let tuple = "920183a17902a17801a16182a17102a17001";
    // Two ops in `a`: a route to a map node; changed keys first, newest first.
    assert_eq!(
        lua(
            tuple,
            &[op("=", s("v.a.p"), &[U(10)]), op("=", s("v.a.q"), &[U(20)])]
        ),
        lua_ok("920183a17902a17801a16182a1700aa17114")
    );
    // Ops parting at once: `v` itself becomes a map node.
    assert_eq!(
        lua(
            tuple,
            &[op("=", s("v.a.p"), &[U(10)]), op("=", s("v.x"), &[U(20)])]
        ),
        lua_ok("920183a17814a16182a17102a1700aa17902")
    );
    // An op on exactly a route's path finds no step left.
    assert_eq!(
        lua(
            tuple,
            &[
                op("=", s("v.a.p"), &[U(10)]),
                op("=", s("v.a.q"), &[U(20)]),
                op("=", s("v.a"), &[U(5)])
            ]
        ),
        lua_err("Field ''v.a'' was not found in the tuple")
    );
    // An op on a prefix of a bar's path.
    assert_eq!(
        lua(
            tuple,
            &[op("=", s("v.a.p"), &[U(10)]), op("=", s("v.a"), &[U(5)])]
        ),
        lua_err("Field 'v.a' UPDATE error: can not update map by non-string key")
    );
    // `#` then `=`: the deleted key's item takes the next key in.
    assert_eq!(
        lua(
            "920183a17903a17801a16102",
            &[op("#", s("v.a"), &[U(1)]), op("=", s("v.y"), &[U(10)])]
        ),
        lua_ok("920182a1790aa17801")
    );
    // `#` of a missing key in a map node is no error.
    assert_eq!(
        lua(
            "920182a16102a17801",
            &[op("=", s("v.x"), &[U(5)]), op("#", s("v.zz"), &[U(1)])]
        ),
        lua_ok("920182a17805a16102")
    );
    // Three ops under one prefix.
    assert_eq!(
        lua(
            "920181a16181a16282a16301a16402",
            &[
                op("=", s("v.a.b.c"), &[U(3)]),
                op("=", s("v.a.b.d"), &[U(4)]),
                op("=", s("v.a.b.e"), &[U(5)])
            ]
        ),
        lua_ok("920181a16181a16283a16505a16404a16303")
    );
    // Arrays: `=`, `!` and `#` inside one array, each on the array as the last left it.
    assert_eq!(
        lua(
            "920193010203",
            &[
                op("=", s("[2][1]"), &[U(10)]),
                op("!", s("[2][2]"), &[U(20)]),
                op("#", s("[2][4]"), &[U(1)])
            ]
        ),
        lua_ok("9201930a1402")
    );
}

#[test]
fn path_ops_mix_with_top_level_ops() {
    // A top-level `=` after a path op replaces the whole field.
    assert_eq!(
        lua(
            "920181a16101",
            &[op("+", s("v.a"), &[U(1)]), op("=", U(2), &[U(7)])]
        ),
        lua_ok("920107")
    );
    assert_eq!(
        lua(
            "930181a1610103",
            &[op("=", I(-1), &[U(5)]), op("=", s("v.a"), &[U(6)])]
        ),
        lua_ok("930181a1610605")
    );
    // [2.11] a path op into a field an earlier op replaced: 2.6 crashes (gh-7705).
    assert_eq!(
        lua(
            "920181a16101",
            &[
                op("=", U(2), &[raw("81a16103")]),
                op("+", s("v.a"), &[U(1)])
            ]
        ),
        lua_err("Field 'v.a' UPDATE error: double update of the same field")
    );
    // [2.11] into a key a bar inserted: 2.6 answers 201 `''v.a.b''` instead.
    assert_eq!(
        lua(
            "920181a17801",
            &[
                op("!", s("v.a"), &[raw("80")]),
                op("=", s("v.a.b"), &[U(10)])
            ]
        ),
        lua_ok("920182a16181a1620aa17801")
    );
    // [2.11] into an element a bar appended: 2.6 answers 201.
    assert_eq!(
        lua(
            "92019301910503",
            &[
                op("!", s("[2][4]"), &[raw("9107")]),
                op("=", s("[2][4][1]"), &[U(10)])
            ]
        ),
        lua_ok("92019401910503910a")
    );
}

#[test]
fn skipping_mode_skips_failing_path_ops() {
    // [2.6] UPSERT: a missing key and a bad path are skipped, the rest applies.
    let ops_bytes = enc(&ops(&[
        op("+", s("v.b"), &[U(1)]),
        op("=", s("v..a"), &[U(5)]),
        op("=", s("v.c"), &[U(2)]),
    ]));
    let decoded = UpdateOps::decode(&ops_bytes, 1, &names).expect("decodes");
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    decoded
        .apply_skipping_failures(&unhex("920181a16101"), &mut out, &[], &mut |error| {
            skipped.push(error.to_string())
        })
        .expect("applies");
    assert_eq!(hex(&out), "920182a16302a16101");
    assert_eq!(
        skipped,
        [
            "Field ''v.b'' was not found in the tuple",
            "Field 'v..a' UPDATE error: invalid JSON in position 3",
        ]
    );
}

// ---------------------------------------------------------------- op list decoding

#[test]
fn op_shape_errors() {
    let tuple = t(&[U(1), U(5)]);
    // [2.6, all five]
    assert_eq!(
        run(&tuple, &ops(&[U(5)])),
        err("Illegal parameters, update operation must be an array {op,..}")
    );
    assert_eq!(
        run(&tuple, &ops(&[t(&[])])),
        err("Illegal parameters, update operation must be an array {op,..}, got empty array")
    );
    assert_eq!(
        run(&tuple, &ops(&[t(&[U(1)])])),
        err("Illegal parameters, update operation name must be a string")
    );
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("+", U(1), &[U(1)]), op("++", U(1), &[U(1)])])
        ),
        err("Unknown UPDATE operation #2: \"++\"")
    );
    assert_eq!(
        run(
            &tuple,
            &ops(&[op("+", U(1), &[U(1)]), op("", U(1), &[U(1)])])
        ),
        err("Unknown UPDATE operation #2: \"\"")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", U(1), &[])])),
        err("Unknown UPDATE operation #1: wrong number of arguments, expected 3, got 2")
    );
    assert_eq!(
        run(&tuple, &ops(&[op("+", U(1), &[U(1), U(2)])])),
        err("Unknown UPDATE operation #1: wrong number of arguments, expected 3, got 4")
    );
    assert_eq!(
        run(&tuple, &ops(&[op(":", U(1), &[U(1), U(2)])])),
        err("Unknown UPDATE operation #1: wrong number of arguments, expected 5, got 4")
    );
}

#[test]
fn decode_errors_come_before_execution_errors() {
    // [2.6: {'+',2,1},{'+',2,'x'} ⇒ the argument error of op 2, not a double update]
    assert_eq!(
        run(&t(&[U(1), U(5)]), &ops(&[op("+", U(1), &[U(1)]), op("+", U(1), &[s("x")])])),
        err("Argument type in operation '+' on field 2 does not match field type: expected a number")
    );
}

#[test]
fn op_list_errors() {
    let tuple = enc(&t(&[U(1)]));
    let decode = |bytes: &[u8]| {
        UpdateOps::decode(bytes, 0, &names)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        decode(&enc(&U(1))),
        Err("Invalid MsgPack - packet body".into())
    );
    assert_eq!(
        decode(&[0x91, 0x93, 0xa1, b'=']),
        Err("Invalid MsgPack - packet body".into())
    );
    assert_eq!(decode(&[]), Err("Invalid MsgPack - packet body".into()));
    let mut trailing = enc(&ops(&[]));
    trailing.push(0x01);
    assert_eq!(
        decode(&trailing),
        Err("Illegal parameters, can't unpack update operations".into())
    );
    // [2.6: 4001 ops refused, 4000 accepted]
    let many = |n| ops(&vec![op("=", U(0), &[U(1)]); n]);
    assert_eq!(
        decode(&enc(&many(4001))),
        Err("Illegal parameters, too many operations for update".into())
    );
    let bytes = enc(&many(4000));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("4000 ops decode");
    let mut out = Vec::new();
    decoded
        .apply(&tuple, &mut out, &[])
        .expect("4000 sets apply");
    assert_eq!(out, enc(&t(&[U(1)])));
    // An empty list is a no-op.
    assert_eq!(run(&t(&[U(1), s("x")]), &ops(&[])), ok(&[U(1), s("x")]));
}

// ---------------------------------------------------------------- tuple input

#[test]
fn bad_tuples_are_reported_not_panicked_on() {
    let bytes = enc(&ops(&[op("=", U(1), &[U(1)])]));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
    let mut out = Vec::new();
    assert_eq!(
        decoded.apply(&enc(&U(1)), &mut out, &[]),
        Err(StorageError::TupleNotArray)
    );
    assert_eq!(
        decoded.apply(&[0x92, 0x01], &mut out, &[]),
        Err(StorageError::InvalidMsgpack("tuple"))
    );
    assert_eq!(
        decoded.apply(&[], &mut out, &[]),
        Err(StorageError::InvalidMsgpack("tuple"))
    );
    assert!(out.is_empty(), "a failed apply leaves out untouched");
}

#[test]
fn apply_appends_to_out_and_keeps_untouched_tail_verbatim() {
    let fields: Vec<TestValue> = (0..40).map(U).collect();
    let tuple = t(&fields);
    let bytes = enc(&ops(&[op("+", U(1), &[U(100)])]));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
    let mut out = vec![0xaa];
    decoded.apply(&enc(&tuple), &mut out, &[]).expect("applies");
    let mut expected_fields = fields.clone();
    expected_fields[1] = U(101);
    let mut expected = vec![0xaa];
    expected.extend(enc(&t(&expected_fields)));
    assert_eq!(out, expected);
}

#[test]
fn a_few_ops_stay_inline() {
    let bytes = enc(&ops(&[
        op("+", U(1), &[U(1)]),
        op("=", U(2), &[U(1)]),
        op("!", U(0), &[U(1)]),
        op("#", U(0), &[U(1)]),
    ]));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
    assert!(!decoded.ops.spilled());
    assert_eq!(decoded.len(), 4);
}

// ---------------------------------------------------------------- UPSERT mode

#[test]
fn skipping_mode_skips_failed_ops_and_applies_the_rest() {
    let bytes = enc(&ops(&[
        op("+", U(1), &[U(1)]),
        op("+", U(2), &[U(1)]),
        op("=", U(9), &[U(1)]),
        op("+", U(1), &[U(1)]),
        op("=", U(0), &[U(7)]),
    ]));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
    let mut skipped = Vec::new();
    let mut out = Vec::new();
    decoded
        .apply_skipping_failures(&enc(&t(&[U(1), U(5), s("a")])), &mut out, &[], &mut |e| {
            skipped.push(e.to_string())
        })
        .expect("applies");
    assert_eq!(out, enc(&t(&[U(7), U(6), s("a")])));
    assert_eq!(
        skipped,
        [
            "Argument type in operation '+' on field 3 does not match field type: expected a number",
            "Field 10 was not found in the tuple",
            "Field 2 UPDATE error: double update of the same field",
        ]
    );
}

#[test]
fn skipping_mode_still_reports_broken_tuples() {
    let bytes = enc(&ops(&[op("=", U(1), &[U(1)])]));
    let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
    let mut out = Vec::new();
    let result = decoded.apply_skipping_failures(&[0x92, 0x01], &mut out, &[], &mut |_| {});
    assert_eq!(result, Err(StorageError::InvalidMsgpack("tuple")));
}

// ---------------------------------------------------------------- touched fields

#[test]
fn lowest_field_touched() {
    let lowest = |list: &[TestValue], count| {
        let bytes = enc(&ops(list));
        let decoded = UpdateOps::decode(&bytes, 0, &names).expect("valid ops");
        decoded.lowest_field_touched(count)
    };
    assert_eq!(lowest(&[], 3), None);
    assert_eq!(
        lowest(&[op("+", U(2), &[U(1)]), op("=", U(1), &[U(1)])], 3),
        Some(1)
    );
    assert_eq!(lowest(&[op("=", I(-1), &[U(1)])], 3), Some(2));
    assert_eq!(lowest(&[op("!", I(-1), &[U(1)])], 3), Some(3));
    // After deleting up to 2 fields, -1 may be field 0.
    assert_eq!(
        lowest(&[op("#", U(5), &[U(2)]), op("=", I(-1), &[U(1)])], 3),
        Some(0)
    );
    assert_eq!(lowest(&[op("=", I(-10), &[U(1)])], 3), Some(0));
    assert_eq!(lowest(&[op("=", s("w"), &[U(1)])], 3), Some(2));
}

// ---------------------------------------------------------------- properties

mod props {
    use super::{enc, names, op, ops, s, t, TestValue, UpdateOps};
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = TestValue> {
        prop_oneof![
            Just(TestValue::Nil),
            any::<bool>().prop_map(TestValue::Bool),
            any::<u64>().prop_map(TestValue::U),
            (0u64..20).prop_map(TestValue::U),
            (i64::MIN..0).prop_map(TestValue::I),
            any::<i64>().prop_map(TestValue::IFmt),
            any::<f32>().prop_map(TestValue::F32),
            any::<f64>().prop_map(TestValue::F64),
            "[a-z]{0,6}".prop_map(TestValue::S),
            Just(TestValue::Dec),
        ]
    }

    fn value() -> impl Strategy<Value = TestValue> {
        prop_oneof![
            4 => leaf(),
            1 => prop::collection::vec(leaf(), 0..3).prop_map(TestValue::A),
        ]
    }

    fn field_id() -> impl Strategy<Value = TestValue> {
        prop_oneof![
            6 => (-8i64..8).prop_map(|n| if n < 0 { TestValue::I(n) } else { TestValue::U(n as u64) }),
            1 => prop::sample::select(vec!["v", "w", "[2]", "[0]", "zz", "[2].a", "", "[9]"])
                .prop_map(s),
            1 => leaf(),
        ]
    }

    fn any_op() -> impl Strategy<Value = TestValue> {
        let name = prop::sample::select(vec!["=", "+", "-", "&", "|", "^", ":", "!", "#", "x"]);
        (
            name,
            field_id(),
            prop::collection::vec(value(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(name, field, mut args, well_formed)| {
                // Mostly give each op the argument count it needs, so execution is reached.
                if well_formed {
                    let wanted = if name == ":" { 3 } else { 1 };
                    args.resize(wanted, TestValue::U(1));
                    if name == ":" {
                        args[2] = s("xyz");
                    }
                }
                op(name, field, &args)
            })
    }

    #[derive(Debug, Clone)]
    enum ModelOp {
        Set(i64, TestValue),
        Insert(i64, TestValue),
        Delete(i64, u64),
    }

    fn model_op() -> impl Strategy<Value = ModelOp> {
        prop_oneof![
            ((-7i64..7), leaf()).prop_map(|(f, v)| ModelOp::Set(f, v)),
            ((-7i64..7), leaf()).prop_map(|(f, v)| ModelOp::Insert(f, v)),
            ((-7i64..7), 1u64..4).prop_map(|(f, c)| ModelOp::Delete(f, c)),
        ]
    }

    fn resolve(field: i64, limit: i64) -> Result<usize, String> {
        let position = if field >= 0 { field } else { limit + field };
        if (0..limit).contains(&position) {
            Ok(position as usize)
        } else if field >= 0 {
            Err(format!("Field {} was not found in the tuple", field + 1))
        } else {
            Err(format!("Field {field} was not found in the tuple"))
        }
    }

    /// A plain `Vec` implementation of `=`, `!`, `#` straight from spec §12.2.
    fn model(tuple: &mut Vec<TestValue>, list: &[ModelOp]) -> Result<(), String> {
        for op in list {
            let len = tuple.len() as i64;
            match op {
                ModelOp::Set(field, value) if *field == len => tuple.push(value.clone()),
                ModelOp::Set(field, value) => tuple[resolve(*field, len)?] = value.clone(),
                ModelOp::Insert(field, value) => {
                    tuple.insert(resolve(*field, len + 1)?, value.clone())
                }
                ModelOp::Delete(field, count) => {
                    let position = resolve(*field, len)?;
                    let end = position + (*count as usize).min(tuple.len() - position);
                    tuple.drain(position..end);
                }
            }
        }
        Ok(())
    }

    fn wire(list: &[ModelOp], base: u32) -> TestValue {
        let field = |f: i64| {
            if f >= 0 {
                TestValue::U(f as u64 + u64::from(base))
            } else {
                TestValue::I(f)
            }
        };
        ops(&list
            .iter()
            .map(|m| match m {
                ModelOp::Set(f, v) => op("=", field(*f), std::slice::from_ref(v)),
                ModelOp::Insert(f, v) => op("!", field(*f), std::slice::from_ref(v)),
                ModelOp::Delete(f, c) => op("#", field(*f), &[TestValue::U(*c)]),
            })
            .collect::<Vec<_>>())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_ops_on_random_tuples_never_panic(
            tuple in prop::collection::vec(value(), 0..6),
            list in prop::collection::vec(any_op(), 0..8),
            base in 0u32..2,
        ) {
            let bytes = enc(&ops(&list));
            let decoded = UpdateOps::decode(&bytes, base, &names);
            if let Ok(decoded) = &decoded {
                let tuple = enc(&t(&tuple));
                let mut out = Vec::new();
                let strict = decoded.apply(&tuple, &mut out, &[]);
                let mut lenient = Vec::new();
                let mut skipped = 0;
                decoded
                    .apply_skipping_failures(&tuple, &mut lenient, &[], &mut |_| skipped += 1)
                    .expect("a valid tuple never fails in skipping mode");
                // Without failures both modes agree; with one, strict mode reports it.
                prop_assert_eq!(strict.is_ok(), skipped == 0);
                if strict.is_ok() {
                    prop_assert_eq!(out, lenient);
                }
                let _ = decoded.lowest_field_touched(tuple.len() as u32);
            }
        }

        #[test]
        fn random_bytes_never_panic(
            ops_bytes in prop::collection::vec(any::<u8>(), 0..40),
            tuple_bytes in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let _ = UpdateOps::decode(&ops_bytes, 0, &names);
            let valid = enc(&ops(&[op("#", TestValue::I(-1), &[TestValue::U(1)]), op("+", TestValue::U(0), &[TestValue::U(1)]),
                op("!", TestValue::I(-1), &[TestValue::U(1)])]));
            let decoded = UpdateOps::decode(&valid, 0, &names).expect("valid ops");
            let mut out = Vec::new();
            let _ = decoded.apply(&tuple_bytes, &mut out, &[]);
            let _ = decoded.apply_skipping_failures(&tuple_bytes, &mut out, &[], &mut |_| {});
        }

        #[test]
        fn set_insert_delete_agree_with_a_vec_model(
            tuple in prop::collection::vec(leaf(), 0..6),
            list in prop::collection::vec(model_op(), 0..8),
            base in 0u32..2,
        ) {
            let mut expected = tuple.clone();
            let expected = model(&mut expected, &list).map(|()| enc(&t(&expected)));
            let bytes = enc(&wire(&list, base));
            let decoded = UpdateOps::decode(&bytes, base, &names).expect("model ops are valid");
            let mut out = Vec::new();
            let actual = decoded.apply(&enc(&t(&tuple)), &mut out, &[]).map(|()| out).map_err(|e| e.to_string());
            prop_assert_eq!(actual, expected);
        }
    }
}
