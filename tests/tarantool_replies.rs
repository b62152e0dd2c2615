//! Replies that must be Tarantool's, for the mismatches of issue 19 and their siblings: how
//! `+`/`-` results are encoded (float64 in `double` fields, ±inf and NaN), the order of a
//! request's checks (iterator, space, grant, index, key part count, partial HASH key, key
//! types, iterator support), exact-match keys (19 before 18), UPDATE moving a primary key
//! onto a taken one (3, also when another shard holds it), `#` with a count of 2^32 or more,
//! INDEX_BASE as a signed number, writes to ids below 512, and the order and equality of the
//! ICU collations `unicode` and `unicode_ci` (TREE and HASH indexes, string and scalar parts).
//!
//! Every expected value below is what Tarantool 2.6.0 answered on loopback to the same bytes
//! (2026-12-02; docs/tarantool-reference.md, section (h)): data byte for byte, error codes
//! exactly. Error texts are asserted word for word where 2.6 and 2.11 word them alike
//! ([`Text::Same`]); where they differ ([`Text::Of211`]: 3, 23, 94), tarn gives 2.11's words
//! (taken from 2.11's `errcode.h`, as the rest of tarn does) and 2.6's code was checked.
//!
//! `cargo test --release --test integration tarantool_replies:: -- --ignored` runs the same
//! requests against a Tarantool 2.6 started from `scripts/tarantool` (the test creates the
//! spaces below over its admin console) and checks what the versions share: codes, data,
//! and the [`Text::Same`] messages.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tarn::msgpack::{self, Value};
use tarn::protocol::client::{self, decode_reply, split_server_frame};
use tarn::protocol::request::{Select, Update, Upsert};

/// The spaces of this file, as tarn's config and as Tarantool's Lua (same ids, formats and
/// indexes), and a user with no grants.
const TARN_SPACES: &str = r#"
[[space]]
name = "dbl"
id = 600
format = [
    { name = "id", type = "unsigned" },
    { name = "d", type = "double" },
    { name = "n", type = "number" },
    { name = "i", type = "integer" },
    { name = "sc", type = "scalar", is_nullable = true },
]
[[space.index]]
name = "primary"
parts = ["id"]

[[space]]
name = "hash2"
id = 601
format = [
    { name = "a", type = "unsigned" },
    { name = "b", type = "string" },
    { name = "v", type = "unsigned" },
]
[[space.index]]
name = "pk"
type = "HASH"
parts = ["a", "b"]

[[space]]
name = "uniq2"
id = 602
shard = "single"
format = [
    { name = "id", type = "unsigned" },
    { name = "u", type = "unsigned" },
    { name = "v", type = "string" },
]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_u"
parts = ["u"]

[[space]]
name = "comp"
id = 603
format = [
    { name = "a", type = "unsigned" },
    { name = "b", type = "string" },
    { name = "v", type = "unsigned" },
]
[[space.index]]
name = "primary"
parts = ["a", "b"]

[[space]]
name = "dd"
id = 604
format = [
    { name = "id", type = "unsigned" },
    { name = "x", type = "double" },
    { name = "y", type = "number", is_nullable = true },
]
[[space.index]]
name = "primary"
parts = ["id"]

[[space]]
name = "nul"
id = 605
shard = "single"
format = [
    { name = "id", type = "unsigned" },
    { name = "u", type = "unsigned", is_nullable = true },
]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_u"
parts = [{ field = "u", type = "unsigned", is_nullable = true }]

[[space]]
name = "ext"
id = 606
format = [
    { name = "id", type = "unsigned" },
    { name = "a", type = "any" },
    { name = "u", type = "unsigned", is_nullable = true },
    { name = "b", type = "boolean" },
]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_u_b"
type = "Tree"
unique = false
parts = [{ field = "u", is_nullable = true }, "b"]

[[space]]
name = "doc"
id = 607
format = [
    { name = "id", type = "unsigned" },
    { name = "m", type = "any", is_nullable = true },
    { name = "dec", type = "decimal", is_nullable = true },
    { name = "i", type = "integer", is_nullable = true },
]
[[space.index]]
name = "primary"
parts = ["id"]

[[space]]
name = "coll"
id = 608
format = [
    { name = "id", type = "unsigned" },
    { name = "s", type = "string" },
    { name = "sc", type = "scalar", is_nullable = true },
]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_u"
unique = false
parts = [{ field = "s", collation = "unicode" }]
[[space.index]]
name = "by_ci"
unique = false
parts = [{ field = "s", collation = "unicode_ci" }]
[[space.index]]
name = "by_sc"
unique = false
parts = [{ field = "sc", type = "scalar", collation = "unicode_ci", is_nullable = true }]

[[space]]
name = "collh"
id = 609
format = [
    { name = "s", type = "string" },
    { name = "v", type = "unsigned" },
]
[[space.index]]
name = "primary"
type = "HASH"
parts = [{ field = "s", collation = "unicode_ci" }]

[[space]]
name = "collu"
id = 610
format = [
    { name = "s", type = "string" },
    { name = "v", type = "unsigned" },
]
[[space.index]]
name = "primary"
type = "HASH"
parts = [{ field = "s", collation = "unicode" }]

[[user]]
name = "nogrant"
password = "pw"
grants = []
"#;

const TARANTOOL_SPACES: &[&str] = &[
    "s = box.schema.space.create('dbl', {id = 600, format = {{name='id', type='unsigned'}, {name='d', type='double'}, {name='n', type='number'}, {name='i', type='integer'}, {name='sc', type='scalar', is_nullable=true}}}); s:create_index('primary', {type='TREE', parts={'id'}})",
    "s = box.schema.space.create('hash2', {id = 601, format = {{name='a', type='unsigned'}, {name='b', type='string'}, {name='v', type='unsigned'}}}); s:create_index('pk', {type='HASH', parts={'a', 'b'}})",
    "s = box.schema.space.create('uniq2', {id = 602, format = {{name='id', type='unsigned'}, {name='u', type='unsigned'}, {name='v', type='string'}}}); s:create_index('primary', {type='TREE', parts={'id'}}); s:create_index('by_u', {type='TREE', unique=true, parts={'u'}})",
    "s = box.schema.space.create('comp', {id = 603, format = {{name='a', type='unsigned'}, {name='b', type='string'}, {name='v', type='unsigned'}}}); s:create_index('primary', {type='TREE', parts={'a', 'b'}})",
    "s = box.schema.space.create('dd', {id = 604, format = {{name='id', type='unsigned'}, {name='x', type='double'}, {name='y', type='number', is_nullable=true}}}); s:create_index('primary', {type='TREE', parts={'id'}})",
    "s = box.schema.space.create('nul', {id = 605, format = {{name='id', type='unsigned'}, {name='u', type='unsigned', is_nullable=true}}}); s:create_index('primary', {type='TREE', parts={'id'}}); s:create_index('by_u', {type='TREE', unique=true, parts={{field='u', type='unsigned', is_nullable=true}}})",
    "s = box.schema.space.create('ext', {id = 606, format = {{name='id', type='unsigned'}, {name='a', type='any'}, {name='u', type='unsigned', is_nullable=true}, {name='b', type='boolean'}}}); s:create_index('primary', {parts={'id'}}); s:create_index('by_u_b', {type='Tree', unique=false, parts={{field='u', type='unsigned', is_nullable=true}, {field='b', type='boolean'}}})",
    "s = box.schema.space.create('doc', {id = 607, format = {{name='id', type='unsigned'}, {name='m', type='any', is_nullable=true}, {name='dec', type='decimal', is_nullable=true}, {name='i', type='integer', is_nullable=true}}}); s:create_index('primary', {type='TREE', parts={'id'}})",
    "s = box.schema.space.create('coll', {id = 608, format = {{name='id', type='unsigned'}, {name='s', type='string'}, {name='sc', type='scalar', is_nullable=true}}}); s:create_index('primary', {type='TREE', parts={'id'}}); s:create_index('by_u', {type='TREE', unique=false, parts={{field='s', type='string', collation='unicode'}}}); s:create_index('by_ci', {type='TREE', unique=false, parts={{field='s', type='string', collation='unicode_ci'}}}); s:create_index('by_sc', {type='TREE', unique=false, parts={{field='sc', type='scalar', collation='unicode_ci', is_nullable=true}}})",
    "s = box.schema.space.create('collh', {id = 609, format = {{name='s', type='string'}, {name='v', type='unsigned'}}}); s:create_index('primary', {type='HASH', parts={{field='s', type='string', collation='unicode_ci'}}})",
    "s = box.schema.space.create('collu', {id = 610, format = {{name='s', type='string'}, {name='v', type='unsigned'}}}); s:create_index('primary', {type='HASH', parts={{field='s', type='string', collation='unicode'}}})",
    "box.schema.user.create('nogrant', {password = 'pw'})",
];

const KV: u32 = 512;
const CUSTOMERS: u32 = 513;
const DBL: u32 = 600;
const HASH2: u32 = 601;
const UNIQ2: u32 = 602;
const COMP: u32 = 603;
const DD: u32 = 604;
const NUL: u32 = 605;
const EXT: u32 = 606;
const DOC: u32 = 607;
const COLL: u32 = 608;
const COLLH: u32 = 609;
const COLLU: u32 = 610;

// ------------------------------------------------------------------ msgpack values

fn u(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_uint(&mut out, n);
    out
}

fn s(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_str(&mut out, text.as_bytes());
    out
}

/// A msgpack str of these bytes, which need not be UTF-8.
fn sb(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_str(&mut out, bytes);
    out
}

fn bin(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc4, bytes.len() as u8];
    out.extend_from_slice(bytes);
    out
}

fn nil() -> Vec<u8> {
    vec![0xc0]
}

/// A float64 (`cb`) of these bits.
fn f64b(bits: u64) -> Vec<u8> {
    let mut out = vec![0xcb];
    out.extend_from_slice(&bits.to_be_bytes());
    out
}

fn f64v(x: f64) -> Vec<u8> {
    f64b(x.to_bits())
}

/// A float32 (`ca`) of these bits.
fn f32b(bits: u32) -> Vec<u8> {
    let mut out = vec![0xca];
    out.extend_from_slice(&bits.to_be_bytes());
    out
}

fn f32v(x: f32) -> Vec<u8> {
    f32b(x.to_bits())
}

/// A fixext 2 of this extension type.
fn ext(ext_type: i8, payload: [u8; 2]) -> Vec<u8> {
    vec![0xd5, ext_type as u8, payload[0], payload[1]]
}

fn arr(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_array_len(&mut out, items.len() as u32);
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

/// A request body: a map of these keys and values.
fn body(pairs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![0x80 + pairs.len() as u8];
    for (key, value) in pairs {
        out.push(*key);
        out.extend_from_slice(value);
    }
    out
}

fn op(name: &str, field: Vec<u8>, arg: Vec<u8>) -> Vec<u8> {
    arr(&[s(name), field, arg])
}

fn field(n: u64) -> Vec<u8> {
    u(n)
}

fn neg_field(n: i64) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_int(&mut out, n);
    out
}

// ------------------------------------------------------------------ requests

/// One request, encoded with the sync it is sent with.
#[derive(Clone)]
enum Req {
    Select {
        space: u32,
        index: u32,
        iterator: u32,
        key: Vec<u8>,
        limit: u32,
    },
    Insert(u32, Vec<u8>),
    Replace(u32, Vec<u8>),
    Update {
        space: u32,
        index: u32,
        key: Vec<u8>,
        ops: Vec<u8>,
        index_base: u32,
    },
    Delete {
        space: u32,
        index: u32,
        key: Vec<u8>,
    },
    Upsert(u32, Vec<u8>, Vec<u8>),
    /// A hand-made body (a msgpack map) of a request of this type, for values the
    /// encoders' types cannot hold.
    Raw(u64, Vec<u8>),
}

impl Req {
    fn encode(&self, sync: u64, out: &mut Vec<u8>) {
        match self {
            Req::Select {
                space,
                index,
                iterator,
                key,
                limit,
            } => client::encode_select(
                out,
                sync,
                &Select {
                    space_id: *space,
                    index_id: *index,
                    limit: *limit,
                    offset: 0,
                    iterator: *iterator,
                    key,
                    fetch_position: false,
                    after_position: None,
                    after_tuple: None,
                },
            ),
            Req::Insert(space, tuple) => client::encode_insert(out, sync, *space, tuple),
            Req::Replace(space, tuple) => client::encode_replace(out, sync, *space, tuple),
            Req::Update {
                space,
                index,
                key,
                ops,
                index_base,
            } => client::encode_update(
                out,
                sync,
                &Update {
                    space_id: *space,
                    index_id: *index,
                    key,
                    ops,
                    index_base: *index_base,
                },
            ),
            Req::Delete { space, index, key } => {
                client::encode_delete(out, sync, *space, *index, key)
            }
            Req::Raw(request_type, body) => {
                let mut packet = vec![0x82, 0x00];
                msgpack::write_uint(&mut packet, *request_type);
                packet.push(0x01);
                msgpack::write_uint(&mut packet, sync);
                packet.extend_from_slice(body);
                out.push(0xce);
                out.extend_from_slice(&(packet.len() as u32).to_be_bytes());
                out.extend_from_slice(&packet);
            }
            Req::Upsert(space, tuple, ops) => client::encode_upsert(
                out,
                sync,
                &Upsert {
                    space_id: *space,
                    index_id: 0,
                    tuple,
                    ops,
                    index_base: 0,
                },
            ),
        }
    }
}

fn select(space: u32, key: Vec<u8>) -> Req {
    select_it(space, 0, 0, key)
}

fn select_it(space: u32, index: u32, iterator: u32, key: Vec<u8>) -> Req {
    Req::Select {
        space,
        index,
        iterator,
        key,
        limit: 10,
    }
}

fn update(space: u32, key: Vec<u8>, ops: &[Vec<u8>]) -> Req {
    update_in(space, 0, key, ops)
}

fn update_in(space: u32, index: u32, key: Vec<u8>, ops: &[Vec<u8>]) -> Req {
    Req::Update {
        space,
        index,
        key,
        ops: arr(ops),
        index_base: 0,
    }
}

fn update_based(index_base: u32, key: Vec<u8>, ops: &[Vec<u8>]) -> Req {
    Req::Update {
        space: KV,
        index: 0,
        key,
        ops: arr(ops),
        index_base,
    }
}

fn delete(space: u32, key: Vec<u8>) -> Req {
    delete_in(space, 0, key)
}

fn delete_in(space: u32, index: u32, key: Vec<u8>) -> Req {
    Req::Delete { space, index, key }
}

fn upsert(space: u32, tuple: Vec<u8>, ops: &[Vec<u8>]) -> Req {
    Req::Upsert(space, tuple, arr(ops))
}

// ------------------------------------------------------------------ expected replies

/// Whose words an expected error text is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Text {
    /// Tarantool 2.6 and 2.11 word it alike: asserted against both tarn and 2.6.
    Same,
    /// 2.11's words (2.6 words it otherwise, with the same code): asserted against tarn.
    Of211,
}

#[derive(Clone)]
enum Want {
    /// A data reply with these tuples, byte for byte.
    Rows(Vec<Vec<u8>>),
    /// An ok reply without data (PING).
    Ok,
    Error(u32, String, Text),
}

fn rows(tuples: &[Vec<u8>]) -> Want {
    Want::Rows(tuples.to_vec())
}

fn none() -> Want {
    Want::Rows(Vec::new())
}

fn error(code: u32, text: &str) -> Want {
    Want::Error(code, text.to_string(), Text::Same)
}

fn error_211(code: u32, text: &str) -> Want {
    Want::Error(code, text.to_string(), Text::Of211)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Guest,
    /// A user with no grants at all.
    NoGrant,
}

struct Case {
    title: String,
    who: Who,
    request: Req,
    want: Want,
}

/// Steps run in order; a `Pipelined` group is written at once and its replies read after.
enum Step {
    One(Case),
    Pipelined(Vec<Case>),
}

fn case(title: impl Into<String>, request: Req, want: Want) -> Step {
    Step::One(Case {
        title: title.into(),
        who: Who::Guest,
        request,
        want,
    })
}

fn as_nogrant(title: impl Into<String>, request: Req, want: Want) -> Step {
    Step::One(Case {
        title: title.into(),
        who: Who::NoGrant,
        request,
        want,
    })
}

// ------------------------------------------------------------------ the cases

/// kv's tuples here: `[id, id, "v"]`.
fn kv_row(id: u64) -> Vec<u8> {
    arr(&[u(id), u(id), s("v")])
}

fn setup() -> Vec<Step> {
    let mut steps: Vec<Step> = (1..=8)
        .map(|id| {
            case(
                format!("kv {id}"),
                Req::Replace(KV, kv_row(id)),
                rows(&[kv_row(id)]),
            )
        })
        .collect();
    for tuple in [
        (UNIQ2, arr(&[u(1), u(10), s("a")])),
        (UNIQ2, arr(&[u(2), u(20), s("b")])),
        (HASH2, arr(&[u(1), s("a"), u(5)])),
        (COMP, arr(&[u(1), s("a"), u(5)])),
        (NUL, arr(&[u(1), nil()])),
        (NUL, arr(&[u(2), u(7)])),
    ] {
        steps.push(case(
            "setup",
            Req::Replace(tuple.0, tuple.1.clone()),
            rows(&[tuple.1]),
        ));
    }
    steps
}

const INF: u64 = 0x7ff0_0000_0000_0000;
const NEG_INF: u64 = 0xfff0_0000_0000_0000;

/// `dbl`'s tuple `[1, d, n, i(, sc)]`.
fn dbl(d: Vec<u8>, n: Vec<u8>, sc: Option<Vec<u8>>) -> Vec<u8> {
    let mut fields = vec![u(1), d, n, u(3)];
    fields.extend(sc);
    arr(&fields)
}

fn dbl_base() -> Vec<u8> {
    dbl(f64v(1.5), f64v(2.5), Some(f64v(4.5)))
}

/// Item 1: the number a `+`/`-` stores. Tarantool computes in double when an operand is a
/// float; the result is a float32 when it lies within ±FLT_MAX and float32 holds it exactly,
/// except in a field the format types `double` (at the field's final position), where it is
/// a float64; a NaN result is the NaN operand, quieted (x86).
fn arithmetic() -> Vec<Step> {
    let mut steps = Vec::new();
    let on_base = |steps: &mut Vec<Step>, title: &str, op: Vec<u8>, result: Vec<u8>| {
        steps.push(case(
            "reset",
            Req::Replace(DBL, dbl_base()),
            rows(&[dbl_base()]),
        ));
        steps.push(case(
            title,
            update(DBL, arr(&[u(1)]), &[op]),
            rows(&[result]),
        ));
    };
    let d = |value: Vec<u8>| dbl(value, f64v(2.5), Some(f64v(4.5)));
    let n = |value: Vec<u8>| dbl(f64v(1.5), value, Some(f64v(4.5)));
    let sc = |value: Vec<u8>| dbl(f64v(1.5), f64v(2.5), Some(value));
    on_base(
        &mut steps,
        "double d + 1",
        op("+", field(1), u(1)),
        d(f64v(2.5)),
    );
    on_base(
        &mut steps,
        "double d + float 1.0",
        op("+", field(1), f32v(1.0)),
        d(f64v(2.5)),
    );
    on_base(
        &mut steps,
        "double d - 1.5",
        op("-", field(1), f64v(1.5)),
        d(f64v(0.0)),
    );
    on_base(
        &mut steps,
        "double d + 0.1",
        op("+", field(1), f64v(0.1)),
        d(f64v(1.5 + 0.1)),
    );
    on_base(
        &mut steps,
        "double d + inf",
        op("+", field(1), f64b(INF)),
        d(f64b(INF)),
    );
    on_base(
        &mut steps,
        "double d - nan",
        op("-", field(1), f64b(0x7ff8_0000_0000_0000)),
        d(f64b(0x7ff8_0000_0000_0000)),
    );
    on_base(
        &mut steps,
        "number n + 1",
        op("+", field(2), u(1)),
        n(f32v(3.5)),
    );
    on_base(
        &mut steps,
        "number n + inf",
        op("+", field(2), f64b(INF)),
        n(f64b(INF)),
    );
    on_base(
        &mut steps,
        "number n - inf",
        op("-", field(2), f64b(INF)),
        n(f64b(NEG_INF)),
    );
    on_base(
        &mut steps,
        "number n + FLT_MAX",
        op("+", field(2), f64v(f64::from(f32::MAX))),
        n(f32b(0x7f7f_ffff)),
    );
    on_base(
        &mut steps,
        "number n + 1e300",
        op("+", field(2), f64v(1e300)),
        n(f64v(1e300)),
    );
    on_base(
        &mut steps,
        "scalar sc + 1",
        op("+", field(4), u(1)),
        sc(f32v(5.5)),
    );
    on_base(
        &mut steps,
        "scalar sc + float inf",
        op("+", field(4), f32v(f32::INFINITY)),
        sc(f64b(INF)),
    );
    steps.push(case(
        "reset",
        Req::Replace(DBL, dbl_base()),
        rows(&[dbl_base()]),
    ));
    steps.push(case(
        "integer i + 0.5",
        update(DBL, arr(&[u(1)]), &[op("+", field(3), f64v(0.5))]),
        error_211(
            23,
            "Tuple field 4 (i) type does not match one required by operation: expected integer, got float",
        ),
    ));
    // NaN operands and results, on `n` of `[1, 1.5, n, 3]`.
    for (title, value, op_, result) in [
        (
            "signalling NaN + 1",
            f64b(0x7ff0_0000_0000_0001),
            op("+", field(2), u(1)),
            f64b(0x7ff8_0000_0000_0001),
        ),
        (
            "inf - inf",
            f64b(INF),
            op("-", field(2), f64b(INF)),
            f64b(0xfff8_0000_0000_0000),
        ),
        (
            "NaN1 - -NaN2",
            f64b(0x7ff8_0000_0000_0001),
            op("-", field(2), f64b(0xfff8_0000_0000_0002)),
            f64b(0x7ff8_0000_0000_0001),
        ),
        (
            "1.5 - NaN1",
            f64v(1.5),
            op("-", field(2), f64b(0x7ff8_0000_0000_0001)),
            f64b(0x7ff8_0000_0000_0001),
        ),
        (
            "1.5 - -NaN1",
            f64v(1.5),
            op("-", field(2), f64b(0xfff8_0000_0000_0001)),
            f64b(0xfff8_0000_0000_0001),
        ),
        (
            "1.5 - float signalling NaN",
            f64v(1.5),
            op("-", field(2), f32b(0x7f80_0001)),
            f64b(0x7ff8_0000_2000_0000),
        ),
        (
            "float NaN + 1",
            f32b(0x7fc0_0003),
            op("+", field(2), u(1)),
            f64b(0x7ff8_0000_6000_0000),
        ),
        (
            "-0.0 - 0.0",
            f64v(-0.0),
            op("-", field(2), f64v(0.0)),
            f32b(0x8000_0000),
        ),
        (
            "uint max + 1.0",
            u(u64::MAX),
            op("+", field(2), f64v(1.0)),
            f32b(0x5f80_0000),
        ),
    ] {
        let before = dbl(f64v(1.5), value, None);
        steps.push(case(
            "reset",
            Req::Replace(DBL, before.clone()),
            rows(&[before]),
        ));
        steps.push(case(
            title,
            update(DBL, arr(&[u(1)]), &[op_]),
            rows(&[dbl(f64v(1.5), result, None)]),
        ));
    }
    // UPSERT of a present key applies the same arithmetic (it answers no tuple).
    for (title, op_, after) in [
        ("upsert double d + 1", op("+", field(1), u(1)), d(f64v(2.5))),
        (
            "upsert number n + inf",
            op("+", field(2), f64b(INF)),
            n(f64b(INF)),
        ),
        (
            "upsert scalar sc - float NaN",
            op("-", field(4), f32b(0x7fc0_0000)),
            sc(f64b(0x7ff8_0000_0000_0000)),
        ),
    ] {
        steps.push(case(
            "reset",
            Req::Replace(DBL, dbl_base()),
            rows(&[dbl_base()]),
        ));
        let other = dbl(f64v(9.5), f64v(9.5), None);
        steps.push(case(title, upsert(DBL, other, &[op_]), none()));
        steps.push(case("its tuple", select(DBL, arr(&[u(1)])), rows(&[after])));
    }
    // The field a result lands in decides, not the one it was computed in.
    let dd_base = arr(&[u(1), f64v(1.5), f64v(2.5)]);
    for (title, ops, result) in [
        (
            "number y + 1, then # x: into the double field",
            vec![op("+", field(2), u(1)), op("#", field(1), u(1))],
            arr(&[u(1), f64v(3.5)]),
        ),
        (
            "double x + 1, then ! before it: into the number field",
            vec![op("+", field(1), u(1)), op("!", field(1), f64v(7.0))],
            arr(&[u(1), f64v(7.0), f32v(2.5), f64v(2.5)]),
        ),
        (
            "double x by name + 1",
            vec![arr(&[s("+"), s("x"), u(1)])],
            arr(&[u(1), f64v(2.5), f64v(2.5)]),
        ),
        (
            "double x as -2, + 1",
            vec![op("+", neg_field(-2), u(1))],
            arr(&[u(1), f64v(2.5), f64v(2.5)]),
        ),
    ] {
        steps.push(case(
            "reset",
            Req::Replace(DD, dd_base.clone()),
            rows(std::slice::from_ref(&dd_base)),
        ));
        steps.push(case(title, update(DD, arr(&[u(1)]), &ops), rows(&[result])));
    }
    steps
}

/// Item 4: `#` keeps the low 32 bits of its count.
fn delete_counts() -> Vec<Step> {
    let long = |tail: &[&str]| {
        let mut fields = vec![u(1), f64v(1.5), f64v(2.5), u(3), f64v(4.5)];
        fields.extend(tail.iter().map(|text| s(text)));
        arr(&fields)
    };
    let mut steps = Vec::new();
    let zero = "Field 6 UPDATE error: cannot delete 0 fields";
    for (count, want) in [
        (1u64 << 32, error(29, zero)),
        ((1 << 32) + 1, rows(&[long(&["y", "z"])])),
        ((2 << 32) + 2, rows(&[long(&["z"])])),
        (u64::MAX, rows(&[long(&[])])),
    ] {
        let before = long(&["x", "y", "z"]);
        steps.push(case(
            "reset",
            Req::Replace(DBL, before.clone()),
            rows(&[before]),
        ));
        steps.push(case(
            format!("# 5 {count}"),
            update(DBL, arr(&[u(1)]), &[op("#", field(5), u(count))]),
            want,
        ));
    }
    steps.push(case(
        "upsert # 5 2^32",
        upsert(DBL, dbl_base(), &[op("#", field(5), u(1 << 32))]),
        error(29, zero),
    ));
    steps
}

/// Item 2: an exact match checks its part count (19) before its types (18).
fn exact_matches() -> Vec<Step> {
    let exact = |expected: u32, got: u32| {
        error(
            19,
            &format!("Invalid key part count in an exact match (expected {expected}, got {got})"),
        )
    };
    let part_type = |part: u32, expected: &str| {
        error(
            18,
            &format!(
                "Supplied key type of part {part} does not match index part type: expected {expected}"
            ),
        )
    };
    let bad_op = arr(&[s("%"), u(1), u(1)]);
    vec![
        case(
            "delete kv [1, 2]",
            delete(KV, arr(&[u(1), u(2)])),
            exact(1, 2),
        ),
        case(
            "delete kv ['x', 2]",
            delete(KV, arr(&[s("x"), u(2)])),
            exact(1, 2),
        ),
        case(
            "delete kv [5, 'x']",
            delete(KV, arr(&[u(5), s("x")])),
            exact(1, 2),
        ),
        case("delete kv []", delete(KV, arr(&[])), exact(1, 0)),
        case(
            "delete kv ['x']",
            delete(KV, arr(&[s("x")])),
            part_type(0, "unsigned"),
        ),
        case(
            "delete customers by a non-unique index, 6 parts",
            delete_in(CUSTOMERS, 1, arr(&[u(0), u(1), u(2), u(3), u(4), u(5)])),
            error(
                41,
                "Get() doesn't support partial keys and non-unique indexes",
            ),
        ),
        case("delete hash2 [1]", delete(HASH2, arr(&[u(1)])), exact(2, 1)),
        case(
            "delete hash2 ['x']",
            delete(HASH2, arr(&[s("x")])),
            exact(2, 1),
        ),
        case(
            "delete hash2 [1, 'a', 3]",
            delete(HASH2, arr(&[u(1), s("a"), u(3)])),
            exact(2, 3),
        ),
        case(
            "delete hash2 [1, 2]",
            delete(HASH2, arr(&[u(1), u(2)])),
            part_type(1, "string"),
        ),
        case(
            "delete comp ['x']",
            delete(COMP, arr(&[s("x")])),
            exact(2, 1),
        ),
        case(
            "delete comp [1, 'b', 3]",
            delete(COMP, arr(&[u(1), s("b"), u(3)])),
            exact(2, 3),
        ),
        case(
            "update kv [1, 2]",
            update(KV, arr(&[u(1), u(2)]), &[]),
            exact(1, 2),
        ),
        case(
            "update kv ['x', 2]",
            update(KV, arr(&[s("x"), u(2)]), &[]),
            exact(1, 2),
        ),
        case(
            "update kv [1, 2] with a bad op",
            update(KV, arr(&[u(1), u(2)]), std::slice::from_ref(&bad_op)),
            exact(1, 2),
        ),
        case(
            "update hash2 ['x']",
            update(HASH2, arr(&[s("x")]), &[]),
            exact(2, 1),
        ),
        case(
            "update kv [99] (absent) with a bad op",
            update(KV, arr(&[u(99)]), std::slice::from_ref(&bad_op)),
            none(),
        ),
        case(
            "update kv [1] with a bad op",
            update(KV, arr(&[u(1)]), &[bad_op]),
            error(28, "Unknown UPDATE operation #1: \"%\""),
        ),
        case(
            "select nul by_u [nil]",
            select_it(NUL, 1, 0, arr(&[nil()])),
            rows(&[arr(&[u(1), nil()])]),
        ),
        case(
            "delete nul by_u [nil]",
            delete_in(NUL, 1, arr(&[nil()])),
            part_type(0, "unsigned"),
        ),
        case(
            "update nul by_u [nil]",
            update_in(NUL, 1, arr(&[nil()]), &[]),
            part_type(0, "unsigned"),
        ),
        case(
            "delete nul by_u [nil, 1]",
            delete_in(NUL, 1, arr(&[nil(), u(1)])),
            exact(1, 2),
        ),
    ]
}

/// Item 3: an UPDATE whose new primary key another tuple holds is 3, naming that tuple; a
/// free one 94. Pipelined, so that on two shards some run on the accepting core and some
/// are forwarded, and some new keys are another shard's.
fn primary_key_moves() -> Vec<Step> {
    let moved = |space: &str| {
        error_211(
            94,
            &format!(
                "Attempt to modify a tuple field which is part of primary index in space '{space}'"
            ),
        )
    };
    let taken = |index: &str, space: &str, old: &str, new: &str| {
        error_211(
            3,
            &format!("Duplicate key exists in unique index \"{index}\" in space \"{space}\" with old tuple - {old} and new tuple - {new}"),
        )
    };
    let mut pipelined = Vec::new();
    for from in 1..=4u64 {
        for to in (1..=10u64).filter(|&to| to != from) {
            let want = if to <= 8 {
                taken(
                    "primary",
                    "kv",
                    &format!("[{to}, {to}, \"v\"]"),
                    &format!("[{to}, {from}, \"v\"]"),
                )
            } else {
                moved("kv")
            };
            pipelined.push(Case {
                title: format!("kv [{from}] id = {to}"),
                who: Who::Guest,
                request: update(KV, arr(&[u(from)]), &[op("=", field(0), u(to))]),
                want,
            });
        }
        pipelined.push(Case {
            title: format!("kv [{from}] unchanged"),
            who: Who::Guest,
            request: select(KV, arr(&[u(from)])),
            want: rows(&[kv_row(from)]),
        });
    }
    let set = |field_no: u64, value: Vec<u8>| op("=", field(field_no), value);
    vec![
        Step::Pipelined(pipelined),
        case(
            "kv [1] id + 1",
            update(KV, arr(&[u(1)]), &[op("+", field(0), u(1))]),
            taken("primary", "kv", "[2, 2, \"v\"]", "[2, 1, \"v\"]"),
        ),
        case(
            "kv [1] id = 2 and a bad value: the format first",
            update(KV, arr(&[u(1)]), &[set(0, u(2)), set(2, u(7))]),
            error_211(
                23,
                "Tuple field 3 (value) type does not match one required by operation: expected string, got unsigned",
            ),
        ),
        case(
            "uniq2 [1] id = 2",
            update(UNIQ2, arr(&[u(1)]), &[set(0, u(2))]),
            taken("primary", "uniq2", "[2, 20, \"b\"]", "[2, 10, \"a\"]"),
        ),
        case(
            "uniq2 [1] id = 3",
            update(UNIQ2, arr(&[u(1)]), &[set(0, u(3))]),
            moved("uniq2"),
        ),
        case(
            "uniq2 [1] u = 20",
            update(UNIQ2, arr(&[u(1)]), &[set(1, u(20))]),
            taken("by_u", "uniq2", "[2, 20, \"b\"]", "[1, 20, \"a\"]"),
        ),
        case(
            "uniq2 [1] id = 2, u = 20: the primary index first",
            update(UNIQ2, arr(&[u(1)]), &[set(0, u(2)), set(1, u(20))]),
            taken("primary", "uniq2", "[2, 20, \"b\"]", "[2, 20, \"a\"]"),
        ),
        case(
            "uniq2 [1] id = 3, u = 20: the primary index first",
            update(UNIQ2, arr(&[u(1)]), &[set(0, u(3)), set(1, u(20))]),
            moved("uniq2"),
        ),
        case(
            "uniq2 by_u [10] id = 2",
            update_in(UNIQ2, 1, arr(&[u(10)]), &[set(0, u(2))]),
            taken("primary", "uniq2", "[2, 20, \"b\"]", "[2, 10, \"a\"]"),
        ),
        case(
            "uniq2 by_u [10] id = 3",
            update_in(UNIQ2, 1, arr(&[u(10)]), &[set(0, u(3))]),
            moved("uniq2"),
        ),
        case(
            "comp [1, 'a'] b = 'b'",
            update(COMP, arr(&[u(1), s("a")]), &[set(1, s("b"))]),
            moved("comp"),
        ),
        case(
            "upsert kv [1] id = 2 is skipped",
            upsert(KV, kv_row(1), &[set(0, u(2))]),
            none(),
        ),
        case("kv [1] as it was", select(KV, arr(&[u(1)])), rows(&[kv_row(1)])),
        case("kv [2] as it was", select(KV, arr(&[u(2)])), rows(&[kv_row(2)])),
    ]
}

/// Item 5: a SELECT checks its iterator, then its space, the grant, the index, the key's
/// part count, a partial HASH key, the key's types, and what the index supports.
fn select_order() -> Vec<Step> {
    let invalid_iterator = || error(1, "Illegal parameters, Invalid iterator type");
    let partial = |got: u32| {
        error(
            136,
            &format!("HASH index  does not support selects via a partial key (expected 2 parts, got {got}). Please Consider changing index type to TREE."),
        )
    };
    let part_type = |part: u32, expected: &str| {
        error(
            18,
            &format!(
                "Supplied key type of part {part} does not match index part type: expected {expected}"
            ),
        )
    };
    let unsupported = |index: &str, kind: &str, space: &str| {
        error(
            112,
            &format!("Index '{index}' ({kind}) of space '{space}' (memtx) does not support requested iterator type"),
        )
    };
    let hash_row = arr(&[u(1), s("a"), u(5)]);
    vec![
        case(
            "iterator 12, space 9999",
            select_it(9999, 0, 12, arr(&[])),
            invalid_iterator(),
        ),
        case(
            "iterator 12, kv index 7",
            select_it(KV, 7, 12, arr(&[])),
            invalid_iterator(),
        ),
        case(
            "iterator 12, kv key ['x']",
            select_it(KV, 0, 12, arr(&[s("x")])),
            invalid_iterator(),
        ),
        case(
            "iterator 0xffffffff",
            select_it(KV, 0, u32::MAX, arr(&[])),
            invalid_iterator(),
        ),
        case(
            "iterator 2^31",
            select_it(KV, 0, 1 << 31, arr(&[])),
            invalid_iterator(),
        ),
        as_nogrant(
            "no grant: space 9999",
            select(9999, arr(&[])),
            error(36, "Space '9999' does not exist"),
        ),
        as_nogrant(
            "no grant: space 300",
            select(300, arr(&[])),
            error(36, "Space '300' does not exist"),
        ),
        as_nogrant(
            "no grant: kv index 7",
            select_it(KV, 7, 0, arr(&[])),
            error(42, "Read access to space 'kv' is denied for user 'nogrant'"),
        ),
        as_nogrant(
            "no grant: kv iterator 12",
            select_it(KV, 0, 12, arr(&[])),
            invalid_iterator(),
        ),
        as_nogrant(
            "no grant: _user",
            select(304, arr(&[u(1)])),
            error(
                42,
                "Read access to space '_user' is denied for user 'nogrant'",
            ),
        ),
        case("hash2 EQ [1]", select(HASH2, arr(&[u(1)])), partial(1)),
        case("hash2 EQ ['x']", select(HASH2, arr(&[s("x")])), partial(1)),
        case("hash2 EQ []", select(HASH2, arr(&[])), partial(0)),
        case(
            "hash2 EQ [1, 2]",
            select(HASH2, arr(&[u(1), u(2)])),
            part_type(1, "string"),
        ),
        case(
            "hash2 EQ ['x', 'a', 'b']",
            select(HASH2, arr(&[s("x"), s("a"), s("b")])),
            error(31, "Invalid key part count (expected [0..2], got 3)"),
        ),
        case(
            "hash2 GE [1]",
            select_it(HASH2, 0, 5, arr(&[u(1)])),
            partial(1),
        ),
        case("hash2 GE []", select_it(HASH2, 0, 5, arr(&[])), partial(0)),
        case(
            "hash2 ALL [1]",
            select_it(HASH2, 0, 2, arr(&[u(1)])),
            partial(1),
        ),
        case(
            "hash2 GE ['x', 'a']",
            select_it(HASH2, 0, 5, arr(&[s("x"), s("a")])),
            part_type(0, "unsigned"),
        ),
        case(
            "hash2 GE [1, 'a']",
            select_it(HASH2, 0, 5, arr(&[u(1), s("a")])),
            unsupported("pk", "HASH", "hash2"),
        ),
        case(
            "hash2 GT []",
            select_it(HASH2, 0, 6, arr(&[])),
            rows(std::slice::from_ref(&hash_row)),
        ),
        case(
            "hash2 ALL []",
            select_it(HASH2, 0, 2, arr(&[])),
            rows(&[hash_row]),
        ),
        case(
            "kv BITS_ALL_SET ['x']",
            select_it(KV, 0, 7, arr(&[s("x")])),
            part_type(0, "unsigned"),
        ),
        case(
            "kv BITS_ALL_SET []",
            select_it(KV, 0, 7, arr(&[])),
            unsupported("primary", "TREE", "kv"),
        ),
        case(
            "kv BITS_ALL_SET [1, 2]",
            select_it(KV, 0, 7, arr(&[u(1), u(2)])),
            error(31, "Invalid key part count (expected [0..1], got 2)"),
        ),
        case(
            "kv limit 0, key ['x']",
            Req::Select {
                space: KV,
                index: 0,
                iterator: 0,
                key: arr(&[s("x")]),
                limit: 0,
            },
            part_type(0, "unsigned"),
        ),
    ]
}

/// Item 7: writes to ids below 512. Tarantool's views answer 113, an id that names no
/// system space is a missing space (36); a user without grants hears 42 for a system space
/// that exists in Tarantool.
fn system_ids() -> Vec<Step> {
    let missing = |id: u32| error(36, &format!("Space '{id}' does not exist"));
    let read_only = |name: &str| error(113, &format!("View '{name}' is read-only"));
    let write_denied = |name: &str| {
        error(
            42,
            &format!("Write access to space '{name}' is denied for user 'nogrant'"),
        )
    };
    vec![
        case("insert 300", Req::Insert(300, arr(&[u(1)])), missing(300)),
        case("replace 300", Req::Replace(300, arr(&[u(1)])), missing(300)),
        case("update 300", update(300, arr(&[u(1)]), &[]), missing(300)),
        case("upsert 300", upsert(300, arr(&[u(1)]), &[]), missing(300)),
        case("delete 300", delete(300, arr(&[u(1)])), missing(300)),
        case("delete 0", delete(0, arr(&[u(1)])), missing(0)),
        case("delete 511", delete(511, arr(&[u(1)])), missing(511)),
        case(
            "delete 341 (2.6 has no _vspace_sequence)",
            delete(341, arr(&[u(1)])),
            missing(341),
        ),
        case(
            "insert _vspace",
            Req::Insert(281, arr(&[u(999)])),
            read_only("_vspace"),
        ),
        case(
            "update _vindex",
            update(289, arr(&[u(999), u(0)]), &[]),
            read_only("_vindex"),
        ),
        case(
            "insert _vuser",
            Req::Insert(305, arr(&[u(999)])),
            read_only("_vuser"),
        ),
        case(
            "insert _vpriv",
            Req::Insert(313, arr(&[u(999)])),
            read_only("_vpriv"),
        ),
        case(
            "insert _vcollation",
            Req::Insert(277, arr(&[u(999)])),
            read_only("_vcollation"),
        ),
        case(
            "upsert _vfunc",
            upsert(297, arr(&[u(999)]), &[]),
            read_only("_vfunc"),
        ),
        case(
            "delete _vsequence",
            delete(286, arr(&[u(999)])),
            read_only("_vsequence"),
        ),
        as_nogrant(
            "no grant: delete 9999",
            delete(9999, arr(&[u(1)])),
            missing(9999),
        ),
        as_nogrant(
            "no grant: insert 300",
            Req::Insert(300, arr(&[u(1)])),
            missing(300),
        ),
        as_nogrant(
            "no grant: insert _user",
            Req::Insert(304, arr(&[u(999)])),
            write_denied("_user"),
        ),
        as_nogrant(
            "no grant: insert _vuser",
            Req::Insert(305, arr(&[u(999)])),
            write_denied("_vuser"),
        ),
        as_nogrant(
            "no grant: insert _vspace",
            Req::Insert(281, arr(&[u(999)])),
            write_denied("_vspace"),
        ),
        as_nogrant(
            "no grant: delete kv [1, 2]",
            delete(KV, arr(&[u(1), u(2)])),
            write_denied("kv"),
        ),
    ]
}

/// A sibling of item 4: Tarantool keeps INDEX_BASE in an `int`, so 0xffffffff is -1.
fn index_bases() -> Vec<Step> {
    let set = |field_no: u64, value: &str| op("=", field(field_no), s(value));
    vec![
        case(
            "index base 0xffffffff: field 0 is the second",
            update_based(u32::MAX, arr(&[u(1)]), &[set(0, "zz")]),
            error_211(
                23,
                "Tuple field 2 (bucket_id) type does not match one required by operation: expected unsigned, got string",
            ),
        ),
        case(
            "index base 0x80000000, field 0",
            update_based(1 << 31, arr(&[u(1)]), &[set(0, "ww")]),
            error(37, "Field 0 was not found in the tuple"),
        ),
        case(
            "index base 0x80000000, field 5",
            update_based(1 << 31, arr(&[u(1)]), &[set(5, "ww")]),
            error(37, "Field 5 was not found in the tuple"),
        ),
        case(
            "index base 2^32 + 1 is 1",
            Req::Raw(
                4,
                body(&[
                    (0x10, u(u64::from(KV))),
                    (0x15, u((1 << 32) + 1)),
                    (0x20, arr(&[u(1)])),
                    (0x21, arr(&[set(3, "xx")])),
                ]),
            ),
            rows(&[arr(&[u(1), u(1), s("xx")])]),
        ),
        case(
            "space 2^32 + 512 is kv, index 2^32 is 0",
            Req::Raw(
                1,
                body(&[
                    (0x10, u((1 << 32) + u64::from(KV))),
                    (0x11, u(1 << 32)),
                    (0x12, u(10)),
                    (0x14, u(0)),
                    (0x20, arr(&[u(1)])),
                ]),
            ),
            rows(&[arr(&[u(1), u(1), s("xx")])]),
        ),
        case(
            "iterator 2^32 + 2 is ALL",
            Req::Raw(
                1,
                body(&[
                    (0x10, u(u64::from(KV))),
                    (0x12, u(1)),
                    (0x14, u((1 << 32) + 2)),
                    (0x20, arr(&[])),
                ]),
            ),
            rows(&[arr(&[u(1), u(1), s("xx")])]),
        ),
        case("kv [1] back", Req::Replace(KV, kv_row(1)), rows(&[kv_row(1)])),
    ]
}

/// `ext`'s tuple `[id, a, nil, true]`.
fn ext_row(id: u64, a: Vec<u8>) -> Vec<u8> {
    arr(&[u(id), a, nil(), vec![0xc3]])
}

/// Tarantool refuses an extension of a negative type in every field the format types, and
/// of type 0 (MP_UNKNOWN_EXTENSION) in `any`; x86's shift makes that 32, 64, 96 too. Nested
/// values and fields past the format are not checked. UPSERT validates its tuple before it
/// looks at its operations.
fn extensions() -> Vec<Step> {
    let refused = || {
        error_211(
            23,
            "Tuple field 2 (a) type does not match one required by operation: expected any, \
             got extension",
        )
    };
    let with_9 = arr(&[u(9), u(9), s("v"), ext(-1, [1, 2])]);
    vec![
        case(
            "any: ext 0",
            Req::Insert(EXT, ext_row(1, ext(0, [1, 2]))),
            refused(),
        ),
        case(
            "any: ext -1",
            Req::Insert(EXT, ext_row(2, ext(-1, [1, 2]))),
            refused(),
        ),
        case(
            "any: ext -128",
            Req::Insert(EXT, ext_row(2, ext(-128, [1, 2]))),
            refused(),
        ),
        case(
            "any: ext 32",
            Req::Insert(EXT, ext_row(3, ext(32, [1, 2]))),
            refused(),
        ),
        case(
            "any: ext 5",
            Req::Insert(EXT, ext_row(4, ext(5, [1, 2]))),
            rows(&[ext_row(4, ext(5, [1, 2]))]),
        ),
        case(
            "any: ext -1 nested",
            Req::Insert(EXT, ext_row(5, arr(&[ext(-1, [1, 2])]))),
            rows(&[ext_row(5, arr(&[ext(-1, [1, 2])]))]),
        ),
        case(
            "kv: ext -1 past the format",
            Req::Replace(KV, with_9.clone()),
            rows(std::slice::from_ref(&with_9)),
        ),
        case("kv [9] away", delete(KV, arr(&[u(9)])), rows(&[with_9])),
        case(
            "update any to ext 0",
            update(EXT, arr(&[u(4)]), &[op("=", field(1), ext(0, [1, 2]))]),
            refused(),
        ),
        case(
            "upsert of a bad tuple on a row: the tuple's error, not the op's",
            upsert(
                EXT,
                ext_row(4, ext(0, [1, 2])),
                &[op("+", field(1), s("x"))],
            ),
            refused(),
        ),
        case(
            "upsert of a bad tuple on no row: the tuple's error, not the op's",
            upsert(EXT, ext_row(7, ext(-1, [1, 2])), &[arr(&[s("bad")])]),
            refused(),
        ),
        case(
            "ext rows",
            select_it(EXT, 0, 2, arr(&[])),
            rows(&[
                ext_row(4, ext(5, [1, 2])),
                ext_row(5, arr(&[ext(-1, [1, 2])])),
            ]),
        ),
    ]
}

/// A bin is a `blob` in the `got` of 2.11's ER_FIELD_TYPE (`mp_type_strs`).
fn blob_names() -> Vec<Step> {
    vec![
        case(
            "kv: a bin id",
            Req::Insert(KV, arr(&[bin(b"ab"), u(1), s("a")])),
            error_211(
                23,
                "Tuple field 1 (id) type does not match one required by operation: expected \
                 unsigned, got blob",
            ),
        ),
        case(
            "ext: a bin into a boolean by update",
            update(EXT, arr(&[u(4)]), &[op("=", field(3), bin(b"x"))]),
            error_211(
                23,
                "Tuple field 4 (b) type does not match one required by operation: expected \
                 boolean, got blob",
            ),
        ),
    ]
}

/// Tarantool checks a body with `mp_check` only (0xc1 passes as a one-byte value) and never
/// reads a PING's; a NOP may have no body at all.
fn ping_bodies() -> Vec<Step> {
    let body_error = || error(20, "Invalid MsgPack - packet body");
    vec![
        case("ping c1", Req::Raw(64, vec![0xc1]), Want::Ok),
        case("ping [c1]", Req::Raw(64, vec![0x91, 0xc1]), Want::Ok),
        case(
            "ping {c1: c1}",
            Req::Raw(64, vec![0x81, 0xc1, 0xc1]),
            Want::Ok,
        ),
        case("ping 1", Req::Raw(64, vec![0x01]), Want::Ok),
        case("ping c1 c1", Req::Raw(64, vec![0xc1, 0xc1]), body_error()),
        case("ping [c1, ?]", Req::Raw(64, vec![0x92, 0xc1]), body_error()),
        case("ping {} 01", Req::Raw(64, vec![0x80, 0x01]), body_error()),
        case("nop {}", Req::Raw(12, vec![0x80]), body_error()),
        case(
            "nop",
            Req::Raw(12, vec![]),
            error(48, "Unknown request type 12"),
        ),
    ]
}

/// `_vindex` rows: the type as its creator spelled it (`'tree'` by default), all parts maps
/// once one needs options.
fn index_rows() -> Vec<Step> {
    let map = |pairs: &[(&str, Vec<u8>)]| {
        let mut out = vec![0x80 + pairs.len() as u8];
        for (key, value) in pairs {
            out.extend_from_slice(&s(key));
            out.extend_from_slice(value);
        }
        out
    };
    let primary = arr(&[
        u(606),
        u(0),
        s("primary"),
        s("tree"),
        map(&[("unique", vec![0xc3])]),
        arr(&[arr(&[u(0), s("unsigned")])]),
    ]);
    let by_u_b = arr(&[
        u(606),
        u(1),
        s("by_u_b"),
        s("Tree"),
        map(&[("unique", vec![0xc2])]),
        arr(&[
            map(&[
                ("field", u(2)),
                ("type", s("unsigned")),
                ("is_nullable", vec![0xc3]),
            ]),
            map(&[("field", u(3)), ("type", s("boolean"))]),
        ]),
    ]);
    vec![
        case(
            "_vindex ext primary",
            select(289, arr(&[u(606), u(0)])),
            rows(&[primary]),
        ),
        case(
            "_vindex ext by_u_b",
            select(289, arr(&[u(606), u(1)])),
            rows(&[by_u_b]),
        ),
    ]
}

/// Item 6 and decimal arithmetic: JSON-path ops inside a field and `+` in decimal (see
/// docs/tarantool-reference.md (j) for the rules).
fn paths_and_decimals() -> Vec<Step> {
    let hex = |text: &str| -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex"))
            .collect()
    };
    let doc = |m: &str, dec: &str| arr(&[u(1), hex(m), hex(dec), u(5)]);
    vec![
        case(
            "doc [1, {a: 1}, dec 1, 5]",
            Req::Replace(DOC, doc("81a16101", "d501001c")),
            rows(&[doc("81a16101", "d501001c")]),
        ),
        case(
            "= m.a 5",
            update(DOC, arr(&[u(1)]), &[op("=", s("m.a"), u(5))]),
            rows(&[doc("81a16105", "d501001c")]),
        ),
        case(
            "= m.b 6 goes after the map header",
            update(DOC, arr(&[u(1)]), &[op("=", s("[2].b"), u(6))]),
            rows(&[doc("82a16206a16105", "d501001c")]),
        ),
        case(
            "+ on a missing key is 201, the path quoted twice",
            update(DOC, arr(&[u(1)]), &[op("+", s("m.zz"), u(1))]),
            error(201, "Field ''m.zz'' was not found in the tuple"),
        ),
        case(
            "# of two map pairs is 29",
            update(DOC, arr(&[u(1)]), &[op("#", s("m.a"), u(2))]),
            error(
                29,
                "Field 'm.a' UPDATE error: can delete only 1 field from a map in a row",
            ),
        ),
        case(
            "dec 1 + 1 is decimal 2",
            update(DOC, arr(&[u(1)]), &[op("+", field(2), u(1))]),
            rows(&[doc("82a16206a16105", "d501002c")]),
        ),
        case(
            "dec 2 - 0.5 (a double) is decimal 1.5",
            update(DOC, arr(&[u(1)]), &[op("-", field(2), f64v(0.5))]),
            rows(&[doc("82a16206a16105", "c7030101015c")]),
        ),
        case(
            "38 nines + 1 overflows",
            update(
                DOC,
                arr(&[u(1)]),
                &[op(
                    "+",
                    field(2),
                    hex("c7150100099999999999999999999999999999999999999c"),
                )],
            ),
            error(
                160,
                "Decimal overflow when performing operation '+' on field 3",
            ),
        ),
        case(
            "upsert skips the failing path op and applies the other",
            upsert(
                DOC,
                doc("80", "d501001c"),
                &[op("+", s("m.zz"), u(1)), op("=", s("m.c"), u(7))],
            ),
            none(),
        ),
        case(
            "the upserted row",
            select(DOC, arr(&[u(1)])),
            rows(&[doc("83a16307a16206a16105", "c7030101015c")]),
        ),
    ]
}

/// coll's rows `[id, s, sc]`: strings equal or close under the ICU collations.
fn coll_rows() -> Vec<Vec<u8>> {
    let row = |id: u64, text: &[u8], sc: Vec<u8>| arr(&[u(id), sb(text), sc]);
    vec![
        row(1, b"a", s("b")),
        row(2, b"A", u(1)),
        row(3, "ä".as_bytes(), s("B")),
        row(4, b"b", s("ä")),
        row(5, b"B", s("A")),
        row(6, "ß".as_bytes(), nil()),
        row(7, b"ss", s("ss")),
        row(8, "é".as_bytes(), s("SS")),
        row(9, "e\u{301}".as_bytes(), bin(b"a")),
        // Not UTF-8: one U+FFFD to ICU, as is the lone lead byte in `sc`.
        row(10, b"\xff", sb(b"\xc3")),
        row(11, b"", s("")),
        row(12, b"a b", s("ab")),
    ]
}

fn coll_select(index: u32, iterator: u32, key: Vec<u8>, ids: &[u64]) -> (Req, Want) {
    let all = coll_rows();
    let request = Req::Select {
        space: COLL,
        index,
        iterator,
        key,
        limit: 100,
    };
    let tuples: Vec<Vec<u8>> = ids.iter().map(|&id| all[id as usize - 1].clone()).collect();
    (request, rows(&tuples))
}

/// A select of `coll`: title, index, iterator, key, the ids of the rows answered.
type CollSelect = (&'static str, u32, u32, Vec<u8>, &'static [u64]);

/// The collations `unicode` (ICU root, tertiary) and `unicode_ci` (primary: case and accents
/// ignored): the order and equality of every iterator in string and scalar parts, and
/// equality in HASH indexes, also across shards (placement hashes the sort key).
fn collations() -> Vec<Step> {
    const BY_U: u32 = 1;
    const BY_CI: u32 = 2;
    const BY_SC: u32 = 3;
    const EQ: u32 = 0;
    const REQ: u32 = 1;
    const ALL: u32 = 2;
    const LT: u32 = 3;
    const LE: u32 = 4;
    const GE: u32 = 5;
    const GT: u32 = 6;
    let mut steps: Vec<Step> = coll_rows()
        .into_iter()
        .map(|tuple| {
            case(
                "coll setup",
                Req::Replace(COLL, tuple.clone()),
                rows(&[tuple]),
            )
        })
        .collect();
    let selects: Vec<CollSelect> = vec![
        (
            "unicode ALL",
            BY_U,
            ALL,
            arr(&[]),
            &[11, 1, 2, 3, 12, 4, 5, 8, 9, 7, 6, 10],
        ),
        ("unicode EQ a", BY_U, EQ, arr(&[s("a")]), &[1]),
        (
            "unicode EQ e+acute = é",
            BY_U,
            EQ,
            arr(&[s("e\u{301}")]),
            &[8, 9],
        ),
        (
            "unicode GE B",
            BY_U,
            GE,
            arr(&[s("B")]),
            &[5, 8, 9, 7, 6, 10],
        ),
        ("unicode LT b", BY_U, LT, arr(&[s("b")]), &[12, 3, 2, 1, 11]),
        (
            "unicode GT A",
            BY_U,
            GT,
            arr(&[s("A")]),
            &[3, 12, 4, 5, 8, 9, 7, 6, 10],
        ),
        ("unicode REQ e+acute", BY_U, REQ, arr(&[s("é")]), &[9, 8]),
        (
            "unicode_ci ALL",
            BY_CI,
            ALL,
            arr(&[]),
            &[11, 1, 2, 3, 12, 4, 5, 8, 9, 6, 7, 10],
        ),
        ("unicode_ci EQ A", BY_CI, EQ, arr(&[s("A")]), &[1, 2, 3]),
        ("unicode_ci EQ Ä", BY_CI, EQ, arr(&[s("Ä")]), &[1, 2, 3]),
        ("unicode_ci REQ b", BY_CI, REQ, arr(&[s("b")]), &[5, 4]),
        ("unicode_ci EQ SS = ß", BY_CI, EQ, arr(&[s("SS")]), &[6, 7]),
        ("unicode_ci EQ E", BY_CI, EQ, arr(&[s("E")]), &[8, 9]),
        (
            "unicode_ci GT a",
            BY_CI,
            GT,
            arr(&[s("a")]),
            &[12, 4, 5, 8, 9, 6, 7, 10],
        ),
        (
            "unicode_ci LE B",
            BY_CI,
            LE,
            arr(&[s("B")]),
            &[5, 4, 12, 3, 2, 1, 11],
        ),
        (
            "unicode_ci GE a\\0",
            BY_CI,
            GE,
            arr(&[sb(b"a\0")]),
            &[1, 2, 3, 12, 4, 5, 8, 9, 6, 7, 10],
        ),
        (
            "unicode_ci EQ not UTF-8",
            BY_CI,
            EQ,
            arr(&[sb(b"\xc3")]),
            &[10],
        ),
        (
            "unicode_ci EQ U+FFFD",
            BY_CI,
            EQ,
            arr(&[s("\u{fffd}")]),
            &[10],
        ),
        (
            "scalar unicode_ci ALL",
            BY_SC,
            ALL,
            arr(&[]),
            &[6, 2, 11, 4, 5, 12, 1, 3, 7, 8, 10, 9],
        ),
        ("scalar unicode_ci EQ a", BY_SC, EQ, arr(&[s("a")]), &[4, 5]),
        ("scalar unicode_ci EQ ß", BY_SC, EQ, arr(&[s("ß")]), &[7, 8]),
        (
            "scalar unicode_ci GE b",
            BY_SC,
            GE,
            arr(&[s("b")]),
            &[1, 3, 7, 8, 10, 9],
        ),
        (
            "scalar unicode_ci LT a",
            BY_SC,
            LT,
            arr(&[s("a")]),
            &[11, 2, 6],
        ),
    ];
    for (title, index, iterator, key, ids) in selects {
        let (request, want) = coll_select(index, iterator, key, ids);
        steps.push(case(title, request, want));
    }
    let collh = |text: &str, v: u64| arr(&[s(text), u(v)]);
    let by_key = |space: u32, text: &str| Req::Select {
        space,
        index: 0,
        iterator: 0,
        key: arr(&[s(text)]),
        limit: 10,
    };
    steps.extend([
        case("collh a", Req::Insert(COLLH, collh("a", 1)), rows(&[collh("a", 1)])),
        case(
            "collh Ä is a's key",
            Req::Insert(COLLH, collh("Ä", 2)),
            error_211(
                3,
                "Duplicate key exists in unique index \"primary\" in space \"collh\" with old tuple - [\"a\", 1] and new tuple - [\"Ä\", 2]",
            ),
        ),
        case("collh é", Req::Replace(COLLH, collh("é", 3)), rows(&[collh("é", 3)])),
        case("collh get A", by_key(COLLH, "A"), rows(&[collh("a", 1)])),
        case("collh get ä", by_key(COLLH, "ä"), rows(&[collh("a", 1)])),
        case("collh get E", by_key(COLLH, "E"), rows(&[collh("é", 3)])),
        case(
            "collh update by E",
            update(COLLH, arr(&[s("E")]), &[op("=", field(1), u(5))]),
            rows(&[collh("é", 5)]),
        ),
        case(
            "collh replace À over a",
            Req::Replace(COLLH, collh("À", 6)),
            rows(&[collh("À", 6)]),
        ),
        case("collh get a", by_key(COLLH, "a"), rows(&[collh("À", 6)])),
        case("collh delete Á", delete(COLLH, arr(&[s("Á")])), rows(&[collh("À", 6)])),
        case("collh get a after the delete", by_key(COLLH, "a"), none()),
        case("collh delete E", delete(COLLH, arr(&[s("E")])), rows(&[collh("é", 5)])),
        case("collu é", Req::Insert(COLLU, collh("é", 1)), rows(&[collh("é", 1)])),
        case(
            "collu e+acute is é's key",
            Req::Insert(COLLU, collh("e\u{301}", 2)),
            error_211(
                3,
                "Duplicate key exists in unique index \"primary\" in space \"collu\" with old tuple - [\"é\", 1] and new tuple - [\"e\u{301}\", 2]",
            ),
        ),
        case("collu É", Req::Insert(COLLU, collh("É", 3)), rows(&[collh("É", 3)])),
        case("collu get e+acute", by_key(COLLU, "e\u{301}"), rows(&[collh("é", 1)])),
        case("collu get É", by_key(COLLU, "É"), rows(&[collh("É", 3)])),
        case("collu get E", by_key(COLLU, "E"), none()),
        case("collu delete e+acute", delete(COLLU, arr(&[s("e\u{301}")])), rows(&[collh("é", 1)])),
        case("collu get é after the delete", by_key(COLLU, "é"), none()),
    ]);
    steps
}

/// Siblings of issue 19 (docs/tarantool-reference.md (m)): an UPDATE of a missing key never
/// reads its ops (`memtx_space_execute_update` returns before `xrow_update_execute`), so
/// every malformed op list that is still an array answers ok and empty, with index base 0
/// and 1, on keys of both shards; the key is checked first (19 / 18), a non-array op list
/// is a body error (`xrow_decode_dml`), and UPSERT reads its ops whether or not the key
/// exists. JOIN, SUBSCRIBE and REGISTER without a body are 20 "request body".
fn missing_keys_and_replication() -> Vec<Step> {
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        ("an op not an array", arr(&[u(1)])),
        ("an empty op", arr(&[arr(&[])])),
        ("an unknown opcode", arr(&[op("?", field(2), u(1))])),
        ("a two-letter opcode", arr(&[op("==", field(2), u(1))])),
        (
            "an opcode not a string",
            arr(&[arr(&[u(1), field(2), u(1)])]),
        ),
        ("a field id of nil", arr(&[op("=", nil(), u(1))])),
        (
            "a field far before the start",
            arr(&[op("=", neg_field(-100), u(1))]),
        ),
        ("an unknown field name", arr(&[op("=", s("zz"), u(1))])),
        ("a bad JSON path", arr(&[op("=", s("[2"), u(1))])),
        (
            "a bad later path step",
            arr(&[op("=", s("value..a"), u(1))]),
        ),
        ("a short op", arr(&[arr(&[s("+"), field(2)])])),
        ("a long op", arr(&[arr(&[s("+"), field(2), u(1), u(4)])])),
        ("+ of a string", arr(&[op("+", field(2), s("x"))])),
        ("# of 0", arr(&[op("#", field(2), u(0))])),
        ("& of a string", arr(&[op("&", field(2), s("x"))])),
        (
            ": of a string offset",
            arr(&[arr(&[s(":"), field(2), s("a"), u(1), s("x")])]),
        ),
        ("4001 ops", arr(&vec![op("=", field(2), u(1)); 4001])),
    ];
    let mut steps = Vec::new();
    for id in 90..94 {
        for (title, ops) in &malformed {
            for index_base in [0, 1] {
                steps.push(case(
                    format!("update of missing kv {id}, base {index_base}: {title}"),
                    Req::Update {
                        space: KV,
                        index: 0,
                        key: arr(&[u(id)]),
                        ops: ops.clone(),
                        index_base,
                    },
                    none(),
                ));
            }
        }
        steps.push(case(
            format!("delete of missing kv {id}"),
            delete(KV, arr(&[u(id)])),
            none(),
        ));
    }
    let unknown_name = arr(&[op("=", s("zz"), u(1))]);
    let with_ops = |key: Vec<u8>, ops: Vec<u8>| Req::Update {
        space: KV,
        index: 0,
        key,
        ops,
        index_base: 0,
    };
    steps.extend([
        case(
            "the key's part count is checked before the ops",
            with_ops(arr(&[u(90), u(1)]), unknown_name.clone()),
            error(
                19,
                "Invalid key part count in an exact match (expected 1, got 2)",
            ),
        ),
        case(
            "the key's type is checked before the ops",
            with_ops(arr(&[s("a")]), unknown_name.clone()),
            error(
                18,
                "Supplied key type of part 0 does not match index part type: expected unsigned",
            ),
        ),
        case(
            "ops not an array are a body error, key or no key",
            with_ops(arr(&[u(90)]), u(1)),
            error(20, "Invalid MsgPack - packet body"),
        ),
        case(
            "ops as a map are a body error",
            with_ops(arr(&[u(90), u(1)]), vec![0x80]),
            error(20, "Invalid MsgPack - packet body"),
        ),
        case(
            "upsert reads its ops on a missing key: unknown name",
            upsert(KV, kv_row(94), &[op("=", s("zz"), u(1))]),
            error(201, "Field 'zz' was not found in the tuple"),
        ),
        case(
            "upsert reads its ops on a missing key: unknown opcode",
            upsert(KV, kv_row(94), &[op("?", field(2), u(1))]),
            error(28, "Unknown UPDATE operation #1: \"?\""),
        ),
        case(
            "upsert reads its ops on a missing key: empty op",
            Req::Upsert(KV, kv_row(94), arr(&[arr(&[])])),
            error(
                1,
                "Illegal parameters, update operation must be an array {op,..}, got empty array",
            ),
        ),
        case("no upsert was stored", select(KV, arr(&[u(94)])), none()),
    ]);
    // SUBSCRIBE (66) answers the same, but 2.6 then closes the connection (a unit test in
    // src/protocol/tests.rs holds its reply).
    for request_type in [65, 70] {
        steps.push(case(
            format!("request type {request_type} without a body"),
            Req::Raw(request_type, Vec::new()),
            error(20, "Invalid MsgPack - request body"),
        ));
    }
    steps
}

fn scenario() -> Vec<Step> {
    let mut steps = setup();
    steps.extend(arithmetic());
    steps.extend(delete_counts());
    steps.extend(exact_matches());
    steps.extend(select_order());
    steps.extend(primary_key_moves());
    steps.extend(system_ids());
    steps.extend(index_bases());
    steps.extend(extensions());
    steps.extend(blob_names());
    steps.extend(ping_bodies());
    steps.extend(index_rows());
    steps.extend(paths_and_decimals());
    steps.extend(collations());
    steps.extend(missing_keys_and_replication());
    steps
}

// ------------------------------------------------------------------ running

/// A connection to tarn or to Tarantool: the greeting's salt, raw packets.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr, user: Option<(&str, &str)>) -> Conn {
        use base64::Engine as _;
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a timeout");
        let mut greeting = [0u8; 128];
        stream.read_exact(&mut greeting).expect("a greeting");
        let salt = base64::engine::general_purpose::STANDARD
            .decode(String::from_utf8_lossy(&greeting[64..]).trim().as_bytes())
            .expect("a base64 salt");
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
        };
        if let Some((name, password)) = user {
            let mut auth = Vec::new();
            client::encode_auth(&mut auth, 0, name, &salt, password.as_bytes());
            conn.stream.write_all(&auth).expect("send auth");
            let packet = conn.read_packet();
            let reply = decode_reply(&packet).expect("an auth reply");
            assert!(!reply.is_error(), "auth: {:?}", reply.error_message());
        }
        conn
    }

    fn read_packet(&mut self) -> Vec<u8> {
        loop {
            if let Ok(Some((packet, used))) = split_server_frame(&self.buf) {
                let packet = packet.to_vec();
                self.buf.drain(..used);
                return packet;
            }
            let mut chunk = [0u8; 65536];
            let read = self.stream.read(&mut chunk).expect("a reply");
            assert!(read > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

/// Which server answers: tarn gives every expected text; Tarantool 2.6 the shared ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    Tarn,
    Tarantool26,
}

fn check(server: Server, case: &Case, sync: u64, packet: &[u8]) -> Result<(), String> {
    let reply = decode_reply(packet).map_err(|e| format!("{}: {e}", case.title))?;
    if reply.sync() != sync {
        return Err(format!("{}: sync {} for {sync}", case.title, reply.sync()));
    }
    let got = match reply.error_code() {
        Some(code) => format!(
            "error {} {:?}",
            code.0,
            reply.error_message().unwrap_or_default()
        ),
        None if reply.data().is_none() => "ok".to_string(),
        None => {
            let mut data = reply.data().unwrap_or_default();
            let count = match msgpack::read_value(&mut data) {
                Ok(Value::Array(count)) => count,
                other => return Err(format!("{}: data {other:?}", case.title)),
            };
            let tuples: Vec<String> = (0..count)
                .map(|_| hex(msgpack::take_value(&mut data).expect("a tuple")))
                .collect();
            format!("rows {tuples:?}")
        }
    };
    let want = match &case.want {
        Want::Ok => "ok".to_string(),
        Want::Rows(tuples) => format!(
            "rows {:?}",
            tuples.iter().map(|t| hex(t)).collect::<Vec<_>>()
        ),
        Want::Error(code, text, Text::Of211) if server == Server::Tarantool26 => {
            if reply.error_code().map(|c| c.0) == Some(*code) {
                return Ok(());
            }
            format!("error {code} (2.6 words it otherwise than {text:?})")
        }
        Want::Error(code, text, _) => format!("error {code} {text:?}"),
    };
    if got == want {
        Ok(())
    } else {
        Err(format!("{}:\n  got  {got}\n  want {want}", case.title))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every step against `addr`; panics listing every reply that differs.
fn run(addr: SocketAddr, server: Server) {
    let mut guest = Conn::open(addr, None);
    let mut nogrant = Conn::open(addr, Some(("nogrant", "pw")));
    let mut sync = 100;
    let mut mismatches = Vec::new();
    let mut total = 0;
    for step in scenario() {
        let cases = match step {
            Step::One(case) => vec![case],
            Step::Pipelined(cases) => cases,
        };
        // One write per connection for the whole group, then the replies in order.
        let mut outgoing = [Vec::new(), Vec::new()];
        let first_sync = sync;
        for case in &cases {
            case.request.encode(sync, &mut outgoing[case.who as usize]);
            sync += 1;
        }
        for (conn, bytes) in [&mut guest, &mut nogrant].into_iter().zip(&outgoing) {
            if !bytes.is_empty() {
                conn.stream.write_all(bytes).expect("send");
            }
        }
        for (at, case) in cases.iter().enumerate() {
            let conn = match case.who {
                Who::Guest => &mut guest,
                Who::NoGrant => &mut nogrant,
            };
            let packet = conn.read_packet();
            total += 1;
            if let Err(mismatch) = check(server, case, first_sync + at as u64, &packet) {
                mismatches.push(mismatch);
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {total} replies differ from Tarantool's:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn replies_are_tarantools_on_one_shard() {
    let server = common::Server::start(1, TARN_SPACES);
    run(server.addr, Server::Tarn);
}

#[test]
fn replies_are_tarantools_on_two_shards() {
    let server = common::Server::start(2, TARN_SPACES);
    run(server.addr, Server::Tarn);
}

/// The expectations themselves, checked against Tarantool 2.6 (see the module doc).
#[test]
#[ignore = "needs tarantool 2.6 installed; run by hand to check the expected values"]
fn expected_values_are_tarantool_2_6s() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let started = std::process::Command::new(root.join("scripts/tarantool/start.sh"))
        .arg(port.to_string())
        .arg(dir.path())
        .status()
        .expect("start.sh runs");
    assert!(started.success(), "tarantool did not start");
    struct Stop<'a>(&'a std::path::Path, &'a std::path::Path);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new(self.0.join("scripts/tarantool/stop.sh"))
                .arg(self.1)
                .status();
        }
    }
    let _stop = Stop(root, dir.path());
    for lua in TARANTOOL_SPACES {
        admin(&dir.path().join("admin.sock"), lua);
    }
    run(
        SocketAddr::from(([127, 0, 0, 1], port)),
        Server::Tarantool26,
    );
}

/// Runs one Lua line on Tarantool's admin console; panics on an error.
fn admin(socket: &std::path::Path, lua: &str) {
    let stream = std::os::unix::net::UnixStream::connect(socket).expect("the admin console");
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut line = String::new();
    // The console greets with two lines.
    for _ in 0..2 {
        line.clear();
        reader.read_line(&mut line).expect("a greeting line");
    }
    (&stream)
        .write_all(format!("{lua}\n").as_bytes())
        .expect("send lua");
    let mut answer = String::new();
    while !answer.ends_with("\n...\n") {
        line.clear();
        if reader.read_line(&mut line).expect("an answer line") == 0 {
            break;
        }
        answer.push_str(&line);
    }
    assert!(!answer.contains("error"), "{lua}: {answer}");
}
