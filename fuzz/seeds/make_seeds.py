#!/usr/bin/env python3
"""Writes the seeds of the structure-aware targets (update_ops, tuple_format, wal_files,
crud_call): byte strings that fuzz/src/gen.rs and the targets read as meaningful inputs
(valid tuples, then updates of them, well-formed files, connector-shaped crud calls), which
random bytes take long to find. Each helper below emits the bytes the generator reads for
one choice; keep them in step with fuzz/src/gen.rs. Run from anywhere:
python3 fuzz/seeds/make_seeds.py (decode_request's seeds are packets, kept as they are)."""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["id", "name", "n", "tags", "b", "s", "f", "[2]"]


# --- gen::value: a tag byte (% 26), then what that tag reads ---------------------------
def uint(n):  # tag 0: a positive fixint (byte & 0x7f)
    assert n < 128
    return bytes([0, n])


def name(text):  # tag 10: one of NAMES
    return bytes([10, NAMES.index(text)])


def text(s):  # tag 12: a string of below(12) bytes taken from the input
    s = s.encode()
    assert len(s) < 12
    return bytes([12, len(s)]) + s


def double(n):  # tag 7: f64(byte) - 100.5
    return bytes([7, n])


def nil():
    return bytes([8])


def boolean(v):
    return bytes([9, 1 if v else 0])


def neg(n):  # tag 25: a negative fixint 0xe0 | (byte & 0x1f)
    return bytes([25, n & 0x1F])


def array(*items):  # tag 15: below(5) items, fixarray unless the next byte % 8 == 0
    assert len(items) < 5
    return bytes([15, len(items), 1]) + b"".join(items)


def uuid():  # tag 18: a uuid ext of 16 bytes
    return bytes([18, 1]) + bytes(range(16))


def tuple_(*values):  # gen::tuple: not raw (byte % 8 != 0), below(7) values
    assert len(values) < 7
    return bytes([1, len(values)]) + b"".join(values)


def key(*values):  # gen::key
    assert len(values) < 4
    return bytes([1, len(values)]) + b"".join(values)


OPS = "=+-&|^!#:"


def field_no(n):  # a field id: byte % 8 in 0..=2 -> uint(byte % 8)
    return bytes([0, n])


def field_name(text):  # byte % 8 == 4 -> one of NAMES
    return bytes([4, NAMES.index(text)])


def op(opcode, field, *args):
    """One update op of the right shape: `args` are already generator bytes."""
    return bytes([OPS.index(opcode)]) + field + b"".join(args)


def op_uint(n):  # an op argument: byte % 4 == 1 -> write_uint(interesting_u64): byte % 4 == 1 -> byte
    return bytes([1, 1, n])


def op_value(value_bytes):  # an op argument: byte % 4 == 3 -> gen::value
    return bytes([3]) + value_bytes


def op_int8(n):  # a splice offset or length: byte % 4 == 0 -> int8
    return bytes([0, n & 0xFF])


def op_text(s):  # a splice paste (the 5th element): byte % 4 == 0 -> below(6) bytes
    s = s.encode()
    return bytes([0, len(s)]) + s


def ops(*items):  # gen::update_ops
    assert len(items) < 5
    return bytes([1, len(items)]) + b"".join(items)


def write(target, name_, data):
    directory = os.path.join(HERE, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name_), "wb") as f:
        f.write(data)


# --- update_ops: variant, quota, then commands (byte % 8; the top bit is the index base)
INSERT, REPLACE, UPDATE, UPSERT, DELETE = 0, 2, 3, 5, 7
BASE1 = 0x80

row = tuple_(uint(5), name("name"), double(150), nil())
write("update_ops", "insert_update_arith", bytes([0, 1, INSERT]) + row
      + bytes([UPDATE, 0]) + key(uint(5))
      + ops(op("+", field_no(2), op_uint(7)), op("=", field_no(3), op_value(array(uint(1))))))
write("update_ops", "insert_update_splice_delete", bytes([1, 1, INSERT]) + row
      + bytes([UPDATE | BASE1, 0]) + key(uint(5))
      + ops(op(":", field_no(2), op_int8(1), op_int8(2), op_text("xy")),
            op("#", field_no(4), op_uint(1)),
            op("!", field_no(4), op_value(text("tail"))))
      + bytes([DELETE, 0]) + key(uint(5)))
write("update_ops", "upsert_twice_bits", bytes([0, 1])
      + bytes([UPSERT]) + tuple_(uint(9), name("id"), uint(3))
      + ops(op("|", field_no(2), op_uint(12)))
      + bytes([UPSERT]) + tuple_(uint(9), name("id"), uint(3))
      + ops(op("^", field_no(2), op_uint(5)), op("&", field_name("n"), op_uint(6))))
write("update_ops", "secondary_keys_replace", bytes([1, 1, INSERT]) + row
      + bytes([INSERT]) + tuple_(uint(6), name("id"), double(10))
      + bytes([REPLACE]) + tuple_(uint(6), name("name"), nil())
      + bytes([UPDATE, 1]) + key(name("id"))
      + ops(op("=", field_name("n"), op_value(double(3)))))
write("update_ops", "composite_hash_key", bytes([2, 1, INSERT])
      + tuple_(uint(1), name("s"), neg(3))
      + bytes([UPDATE, 0]) + key(uint(1), name("s"))
      + ops(op("-", field_no(2), op_uint(2)))
      + bytes([UPSERT]) + tuple_(uint(1), name("s"), neg(3))
      + ops(op("=", field_no(1), op_value(name("b")))))
write("update_ops", "scalar_types", bytes([3, 1, INSERT])
      + tuple_(neg(1), text("Ab"), double(1), array(), boolean(True), uuid())
      + bytes([UPDATE, 0]) + key(text("ab"))
      + ops(op("=", field_name("s"), op_value(text("x"))), op("+", field_no(2), op_uint(1))))
write("update_ops", "small_quota", bytes([4, 0, 0, 1, INSERT])
      + tuple_(uint(1), uint(2), text("0123456789"))
      + bytes([INSERT]) + tuple_(uint(2), uint(2), text("0123456789"))
      + bytes([UPDATE, 0]) + key(uint(1))
      + ops(op("=", field_no(2), op_value(text("0123456789")))))


# --- tuple_format: field count, field types (index << 1 | nullable), exact count, shape,
# key parts (field, type choice, collation), then the tuple and a split point.
def field_type(index, nullable=False):
    return (index << 1) | (1 if nullable else 0)


UNSIGNED, INTEGER, NUMBER, DOUBLE, STRING, BOOLEAN, VARBINARY, SCALAR, UUID, DECIMAL, \
    DATETIME, ARRAY, MAP = range(1, 14)
ANY = 0

write("tuple_format", "kv", bytes([3, field_type(UNSIGNED), field_type(STRING),
                                   field_type(NUMBER, True), 1, 0, 0, 1, 7])
      + tuple_(uint(1), text("a"), double(3)) + bytes([3]))
write("tuple_format", "composite_secondary", bytes([4, field_type(INTEGER), field_type(STRING),
                                                    field_type(SCALAR, True), field_type(MAP, True),
                                                    1, 0b10101, 0, 1, 7, 1, 1, 3, 2, 1, 0])
      + tuple_(neg(2), text("b"), nil(), nil()) + bytes([5]))
write("tuple_format", "exact_count", bytes([2, field_type(UNSIGNED), field_type(UUID, True),
                                            0, 2, 0b100, 0, 1, 7, 1, 1, 7])
      + tuple_(uint(7), uuid()) + bytes([2]))
write("tuple_format", "no_format", bytes([0, 1, 0b110, 0, 4, 7, 1, 4, 7])
      + tuple_(uint(3), text("z")) + bytes([1]))
write("tuple_format", "every_type", bytes([6, field_type(DOUBLE), field_type(BOOLEAN),
                                           field_type(VARBINARY, True), field_type(DATETIME, True),
                                           field_type(DECIMAL, True), field_type(ARRAY, True),
                                           1, 0, 1, 1, 7])
      + tuple_(double(200), boolean(False), nil(), nil(), nil(), array(uint(1))) + bytes([4]))


# --- wal_files: mode (0 WAL, 1 snapshot, 2 recovery), then files ----------------------
def wal_lsn(n):  # any_lsn: byte % 8 != 7 -> LSNS[below(10)], LSNS = 0 1 2 3 4 5 8 ...
    return bytes([0, [0, 1, 2, 3, 4, 5, 8].index(n)])


def good_header():
    return bytes([0])


def wal_batch(*rows):  # chunk byte % 8 >= 2 -> a batch at the next LSN; choice 0 = right
    out = bytes([2, 0, len(rows)])
    for kind, body in rows:
        out += bytes([3 if kind == "replace" else 1]) + body + bytes([1])  # space 512 / 513
    return out


def wal(*batches, cut=False):
    return good_header() + bytes([len(batches)]) + b"".join(batches) + bytes([0 if cut else 1, 40])


def snap_block(*tuples):  # choice 1: built by BlockBuilder, right
    return bytes([1, 1, 1, len(tuples)]) + b"".join(tuples)


def snapshot(*blocks):
    return good_header() + bytes([len(blocks)]) + b"".join(bytes([1]) + b for b in blocks) \
        + bytes([3, 1])


customer = tuple_(uint(1), name("name"), double(120), nil())
write("wal_files", "wal_two_batches", bytes([0]) + wal_lsn(1) + bytes([1])
      + wal(wal_batch(("replace", customer)),
            wal_batch(("replace", customer), ("delete", key(uint(1))))))
write("wal_files", "wal_torn", bytes([0]) + wal_lsn(1) + bytes([1])
      + wal(wal_batch(("replace", customer)), cut=True))
write("wal_files", "snapshot_blocks", bytes([1]) + wal_lsn(3) + bytes([1])
      + snapshot(snap_block(customer, tuple_(uint(2), name("id"), nil())),
                 snap_block(customer)))
write("wal_files", "recover_snapshot_then_wal", bytes([2, 0, 2])
      + wal_lsn(2) + bytes([4]) + snapshot(snap_block(customer))
      + wal_lsn(3) + bytes([0]) + wal(wal_batch(("replace", tuple_(uint(2), name("id"), nil())))))
write("wal_files", "recover_forced_torn", bytes([2, 1, 1])
      + wal_lsn(1) + bytes([0]) + wal(wal_batch(("replace", customer)),
                                      wal_batch(("delete", key(uint(1)))), cut=True))
write("wal_files", "recover_two_wals", bytes([2, 0, 1])
      + wal_lsn(1) + bytes([0]) + wal(wal_batch(("replace", customer)))
      + wal_lsn(2) + bytes([0]) + wal(wal_batch(("delete", key(uint(1))))))


# --- crud_call: function (index into Func::ALL + 1), argument shape, arguments --------
FUNCS = ["insert", "insert_object", "insert_many", "insert_object_many", "replace",
         "replace_object", "replace_many", "replace_object_many", "upsert", "upsert_object",
         "upsert_many", "upsert_object_many", "update", "delete", "get", "select", "pairs",
         "count", "len", "min", "max", "truncate", "storage_info", "stats"]


def func(text_):
    return bytes([FUNCS.index(text_) + 24])


def space(text_):
    return bytes([0, ["customers", "pages", "nope"].index(text_)])


def crud_tuple(id_, name_value, age_value):  # argument 3: id, nil bucket_id, name, age
    return bytes([3, id_, 0]) + name_value + age_value


CRUD_FIELDS = ["id", "bucket_id", "name", "age", "group", "x", "primary"]


def crud_object(**fields):
    out = bytes([4, len(fields)])
    for field, value in fields.items():
        out += bytes([CRUD_FIELDS.index(field)]) + value
    return out


def crud_ops(*items):
    return bytes([6]) + ops(*items)


def conditions(*items):
    ops_ = ["=", "==", "<", "<=", ">", ">=", "!="]
    out = bytes([7, len(items)])
    for op_, field, value in items:
        out += bytes([ops_.index(op_), CRUD_FIELDS.index(field)]) + value
    return out


def options(*pairs):
    names = ["timeout", "bucket_id", "fields", "noreturn", "fetch_latest_metadata",
             "skip_nullability_check_on_flatten", "stop_on_error", "rollback_on_error", "mode",
             "prefer_replica", "first", "after", "batch_size", "force_map_call", "fullscan",
             "vshard_router", "yield_every", "bogus"]
    out = bytes([8, len(pairs)])
    for option, value in pairs:
        out += bytes([names.index(option)]) + value
    return out


def crud(function, *arguments, sync=1):
    return func(function) + bytes([3, len(arguments)]) + b"".join(arguments) + bytes([sync])


write("crud_call", "insert", crud("insert", space("customers"),
                                  crud_tuple(7, name("name"), uint(30))))
write("crud_call", "insert_object_fields", crud("insert_object", space("customers"),
                                                crud_object(id=uint(8), name=text("Ann"),
                                                            age=uint(3)),
                                                options(("fields", bytes([2, 0, 2])))))
write("crud_call", "update", crud("update", space("customers"), bytes([11]) + uint(1),
                                  crud_ops(op("+", field_name("n"), op_uint(1)))))
write("crud_call", "upsert", crud("upsert", space("pages"),
                                  crud_tuple(9, uint(1), uint(2)),
                                  crud_ops(op("=", field_no(2), op_value(uint(3))))))
write("crud_call", "select_conditions", crud("select", space("customers"),
                                             conditions((">=", "age", uint(20))),
                                             options(("first", bytes([1, 2])))))
write("crud_call", "replace_many", crud("replace_many", space("pages"),
                                        bytes([5, 2, 0, 1, 3, 0, 1, 0, 2, 0, 1, 0, 0,
                                               0, 1, 3, 0, 2, 0, 2, 0, 1, 0, 0]),
                                        options(("stop_on_error", bytes([0])))))
write("crud_call", "get_delete_count", crud("get", space("pages"), bytes([11]) + uint(2)))
write("crud_call", "count_min_len", crud("count", space("customers"),
                                         conditions(("<", "id", uint(3)))))


# --- schema_record: the recorded rows of one space (`_space` then `_index` rows), plain
# MessagePack as `schema::user_space_rows` writes them (small values only).
def mp(value):
    if isinstance(value, bool):
        return bytes([0xC3 if value else 0xC2])
    if isinstance(value, int):
        return bytes([value]) if value < 128 else b"\xcd" + struct.pack(">H", value)
    if isinstance(value, str):
        return bytes([0xA0 | len(value)]) + value.encode()
    if isinstance(value, dict):
        return bytes([0x80 | len(value)]) + b"".join(mp(k) + mp(v) for k, v in value.items())
    return bytes([0x90 | len(value)]) + b"".join(mp(item) for item in value)


def space_row(space_id, space_name, fields):
    return mp([space_id, 1, space_name, "memtx", 0, {}, fields])


def index_row(space_id, index_id, index_name, kind, unique, parts):
    return mp([space_id, index_id, index_name, kind, {"unique": unique}, parts])


write("schema_record", "kv", space_row(512, "kv", [
    {"name": "id", "type": "unsigned"}, {"name": "bucket_id", "type": "unsigned"},
    {"name": "value", "type": "string"}])
    + index_row(512, 0, "primary", "tree", True, [[0, "unsigned"]]))
write("schema_record", "customers", space_row(513, "customers", [
    {"name": n, "type": "unsigned"} for n in ["id", "bucket_id", "a", "b", "c", "d"]]
    + [{"name": "name", "type": "string"}])
    + index_row(513, 0, "primary", "tree", True, [[0, "unsigned"]])
    + index_row(513, 1, "composite", "tree", False,
                [[2, "unsigned"], [3, "unsigned"], [4, "unsigned"], [5, "unsigned"], [6, "string"]])
    + index_row(513, 2, "bucket_id", "tree", False, [[1, "unsigned"]]))
write("schema_record", "nullable_collation_hash", space_row(600, "people", [
    {"name": "id", "type": "unsigned"}, {"name": "name", "type": "string"},
    {"name": "nick", "type": "string", "is_nullable": True}, {"name": "score", "type": "number"}])
    + index_row(600, 0, "primary", "hash", True, [[0, "unsigned"]])
    + index_row(600, 1, "by_name", "tree", False, [
        {"field": 1, "type": "string", "collation": 2},
        {"field": 2, "type": "string", "is_nullable": True}]))
write("schema_record", "no_index", space_row(700, "bare", []))
write("schema_record", "foreign_index_row", space_row(701, "a", [])
      + index_row(702, 0, "primary", "tree", True, [[0, "unsigned"]]))
