"""The read-only ``box.space`` methods over CALL, as an application calls them.

``conn.call("box.space.kv:select", [key, opts])`` and the rest: every expected
value and error below is what Tarantool 2.6 answered to the same call
(docs/tarantool-reference.md, section (n)); the suite passes against both.
Counts over a whole space are taken before and after this module's rows are
stored, so rows of other tests do not matter.
"""

import msgpack
import pytest
from tarantool.error import DatabaseError

ER_ILLEGAL_PARAMS = 1
ER_KEY_PART_TYPE = 18
ER_EXACT_MATCH = 19
ER_KEY_PART_COUNT = 31
ER_PROC_LUA = 32
ER_NO_SUCH_PROC = 33
ER_MORE_THAN_ONE_TUPLE = 41
ER_ITERATOR_TYPE = 72
ER_UNSUPPORTED_INDEX_FEATURE = 112

LO, HI = 30001, 30006  # kv ids of this module: LO..HI-1
KV_ROWS = [[i, i, "v%d" % i] for i in range(LO, HI)]
A = 700300  # customers' field `a`, used only here
CUSTOMER_ROWS = [[30000 + i, i, A + i % 2, 1, 1, 1, "n%d" % i] for i in range(1, 6)]


def call(conn, name, *args):
    return conn.call(name, list(args)).data


def error_of(conn, name, *args):
    with pytest.raises(DatabaseError) as raised:
        conn.call(name, list(args))
    return raised.value.args[0], raised.value.args[1]


@pytest.fixture
def kv(conn, key_range):
    key_range("kv", LO, HI)
    before = call(conn, "box.space.kv:len")[0], call(conn, "box.space.kv:bsize")[0]
    for row in KV_ROWS:
        conn.insert("kv", row)
    return before


@pytest.fixture
def customers(conn, key_range):
    key_range("customers", 30000, 30010)
    for row in CUSTOMER_ROWS:
        conn.insert("customers", row)


def test_len_count_and_bsize_add_up_over_the_shards(conn, kv):
    len_before, bsize_before = kv
    assert call(conn, "box.space.kv:len") == [len_before + 5]
    assert call(conn, "box.space.kv.index.primary:len") == [len_before + 5]
    # Arguments of len and bsize are ignored.
    assert call(conn, "box.space.kv:len", 1, 2) == [len_before + 5]
    stored = sum(len(msgpack.packb(row)) for row in KV_ROWS)
    assert call(conn, "box.space.kv:bsize") == [bsize_before + stored]
    assert call(conn, "box.space.kv:count", [LO]) == [1]
    assert call(conn, "box.space.kv:count", [LO + 2], {"iterator": "LT"}) == [
        call(conn, "box.space.kv:count", [LO], {"iterator": "LT"})[0] + 2]
    assert call(conn, "box.space.kv:count", [HI - 2], "GE") == [
        call(conn, "box.space.kv:count", [HI], "GE")[0] + 2]
    assert call(conn, "box.space.kv.index.primary:count", [HI - 1], {"iterator": 6}) == [
        call(conn, "box.space.kv:count", [HI - 1], {"iterator": "GT"})[0]]
    # `false` options are no options; a map key is the empty key, whose default is ALL.
    assert call(conn, "box.space.kv:count", [LO], False) == [1]
    assert call(conn, "box.space.kv:count", {"a": 1}) == [len_before + 5]
    assert isinstance(call(conn, "box.space.kv.index.primary:bsize")[0], int)


def test_get_select_min_max_answer_tuples(conn, kv):
    assert call(conn, "box.space.kv:get", [LO]) == [KV_ROWS[0]]
    assert call(conn, "box.space.kv:get", LO + 1) == [KV_ROWS[1]]
    assert call(conn, "box.space.kv.index.primary:get", [HI]) == []
    assert call(conn, "box.space.kv:select", [LO + 2]) == [[KV_ROWS[2]]]
    assert call(conn, "box.space.kv:select", [HI]) == [[]]
    opts = {"iterator": "ge", "offset": 1, "limit": 2}
    assert call(conn, "box.space.kv:select", [LO], opts) == [KV_ROWS[1:3]]
    assert call(conn, "box.space.kv:select", [LO + 2], "GT") == [
        call(conn, "box.space.kv:select", [LO + 3], "GE")[0]]
    assert call(conn, "box.space.kv:select", [HI - 2], {"iterator": "LE", "limit": 2}) == [
        [KV_ROWS[3], KV_ROWS[2]]]
    assert call(conn, "box.space.kv:select", [LO + 3], {"iterator": "REQ"}) == [[KV_ROWS[3]]]
    # FFI conversions of offset and limit: floats truncated, integers wrapped to 32 bits.
    assert call(conn, "box.space.kv:select", [LO], {"iterator": "GE", "limit": 2.9}) == [
        KV_ROWS[:2]]
    assert call(conn, "box.space.kv:select", [LO], {"iterator": "GE", "limit": 2**32 + 1}) == [
        KV_ROWS[:1]]
    assert call(conn, "box.space.kv:select", [LO], {"iterator": "GE", "offset": -1}) == [[]]
    assert call(conn, "box.space.kv:select", [LO], {"iterator": "GE", "limit": True}) == [
        KV_ROWS[:1]]
    assert call(conn, "box.space.kv.index.primary:min", [LO]) == [KV_ROWS[0]]
    assert call(conn, "box.space.kv.index.primary:max", [HI - 2]) == [KV_ROWS[3]]
    # min and max ignore their options.
    assert call(conn, "box.space.kv.index.primary:min", LO + 1, {"iterator": "LT"}) == [
        KV_ROWS[1]]


def test_secondary_index_reads(conn, customers):
    by_a = "box.space.customers.index.composite"
    odd = [row for row in CUSTOMER_ROWS if row[2] == A + 1]
    even = [row for row in CUSTOMER_ROWS if row[2] == A]
    assert call(conn, by_a + ":select", [A + 1]) == [odd]
    assert call(conn, by_a + ":count", [A]) == [len(even)]
    assert call(conn, by_a + ":min", [A]) == [even[0]]
    assert call(conn, by_a + ":max", [A + 1]) == [odd[-1]]
    assert call(conn, by_a + ":select", [A + 1, 1], {"iterator": "LE", "limit": 10})[0][:3] == [
        odd[2], odd[1], odd[0]]


@pytest.mark.parametrize("name, args, code, message", [
    ("box.space.kv:get", [], ER_EXACT_MATCH,
     "Invalid key part count in an exact match (expected 1, got 0)"),
    ("box.space.kv:get", [[1, 2]], ER_EXACT_MATCH,
     "Invalid key part count in an exact match (expected 1, got 2)"),
    ("box.space.kv:get", [["x"]], ER_KEY_PART_TYPE,
     "Supplied key type of part 0 does not match index part type: expected unsigned"),
    ("box.space.customers.index.composite:get", [[1, 1, 1, 1, "n"]], ER_MORE_THAN_ONE_TUPLE,
     "Get() doesn't support partial keys and non-unique indexes"),
    ("box.space.kv:select", [[2, 3]], ER_KEY_PART_COUNT,
     "Invalid key part count (expected [0..1], got 2)"),
    ("box.space.kv:count", [[1, 2]], ER_KEY_PART_COUNT,
     "Invalid key part count (expected [0..1], got 2)"),
    ("box.space.kv.index.primary:max", [[1, 2]], ER_KEY_PART_COUNT,
     "Invalid key part count (expected [0..1], got 2)"),
    ("box.space.kv:select", ["x"], ER_KEY_PART_TYPE,
     "Supplied key type of part 0 does not match index part type: expected unsigned"),
    ("box.space.kv:select", [[2], "BAD"], ER_ITERATOR_TYPE, "Unknown iterator type 'BAD'"),
    ("box.space.kv:count", [[2], {"iterator": True}], ER_ITERATOR_TYPE,
     "Unknown iterator type 'true'"),
    ("box.space.kv:select", [[2], {"iterator": None}], ER_ITERATOR_TYPE,
     "Unknown iterator type 'cdata<void *>: NULL'"),
    ("box.space.kv:select", [[2], {"iterator": 99}], ER_ILLEGAL_PARAMS,
     "Illegal parameters, Invalid iterator type"),
    ("box.space.kv:count", [[2], {"iterator": -1}], ER_ILLEGAL_PARAMS,
     "Illegal parameters, Invalid iterator type"),
    ("box.space.kv:select", [[2], {"iterator": 7}], ER_UNSUPPORTED_INDEX_FEATURE,
     "Index 'primary' (TREE) of space 'kv' (memtx) does not support requested iterator type"),
    ("box.space.kv:select", [[2], 2], ER_PROC_LUA,
     "builtin/box/schema.lua:1338: attempt to index local 'opts' (a number value)"),
    ("box.space.kv:count", [[2], True], ER_PROC_LUA,
     "builtin/box/schema.lua:1338: attempt to index local 'opts' (a boolean value)"),
    ("box.space.kv:select", [[2], False], ER_PROC_LUA,
     "builtin/box/schema.lua:1524: attempt to index local 'opts' (a boolean value)"),
    ("box.space.kv:select", [[2], {"limit": "x"}], ER_PROC_LUA,
     "builtin/box/schema.lua:1541: bad argument #5 to 'box_select' "
     "(cannot convert 'string' to 'unsigned int')"),
    ("box.space.kv:select", [[2], {"offset": [1]}], ER_PROC_LUA,
     "builtin/box/schema.lua:1541: bad argument #4 to 'box_select' "
     "(cannot convert 'table' to 'unsigned int')"),
    ("box.space.kv:min", [], ER_NO_SUCH_PROC, "Procedure 'box.space.kv:min' is not defined"),
    ("box.space.nope:len", [], ER_NO_SUCH_PROC, "Procedure 'box.space.nope:len' is not defined"),
    ("box.space.kv.index.nope:max", [], ER_NO_SUCH_PROC,
     "Procedure 'box.space.kv.index.nope:max' is not defined"),
    ("box.space.kv.index[0]:len", [], ER_NO_SUCH_PROC,
     "Procedure 'box.space.kv.index[0]:len' is not defined"),
])
def test_errors_are_tarantools(conn, name, args, code, message):
    assert error_of(conn, name, *args) == (code, message)


def test_system_spaces_answer_too(conn):
    row = call(conn, "box.space._space:get", [512])[0]
    assert row[:4] == [512, 1, "kv", "memtx"]
    assert call(conn, "box.space._vindex:select", [512, 0])[0][0][:4] == [512, 0, "primary", "TREE"]


ER_TUPLE_FOUND = 3
ER_TUPLE_NOT_ARRAY = 22
ER_FIELD_MISSING = 39
ER_VIEW_IS_RO = 113
W = 30101  # kv ids of the write tests: W..W+9


@pytest.fixture
def kv_writes(conn, key_range):
    key_range("kv", W, W + 10)


def test_writes_answer_the_tuple_written_or_removed(conn, kv_writes):
    row = [W, 1, "a"]
    assert call(conn, "box.space.kv:insert", row) == [row]
    assert error_of(conn, "box.space.kv:insert", row)[0] == ER_TUPLE_FOUND
    assert call(conn, "box.space.kv:replace", [W, 2, "b"], 5) == [[W, 2, "b"]]
    assert call(conn, "box.space.kv:put", [W + 1, 2, "c"]) == [[W + 1, 2, "c"]]
    # Lua numbers update fields from 1; a scalar key is a key of one part.
    assert call(conn, "box.space.kv:update", [W], [["=", 3, "z"]]) == [[W, 2, "z"]]
    assert call(conn, "box.space.kv:update", W, [["+", 2, 5]]) == [[W, 7, "z"]]
    assert call(conn, "box.space.kv.index.primary:update", [W + 9], [["=", 3, "q"]]) == []
    assert call(conn, "box.space.kv:upsert", [W + 2, 1, "u"], [["=", 3, "w"]]) == []
    assert call(conn, "box.space.kv:upsert", [W + 2, 1, "u"], [["=", 3, "w"]]) == []
    assert call(conn, "box.space.kv:get", W + 2) == [[W + 2, 1, "w"]]
    assert call(conn, "box.space.kv:delete", [W]) == [[W, 7, "z"]]
    assert call(conn, "box.space.kv.index.primary:delete", W) == []
    assert call(conn, "box.space.kv:select", [W], {"iterator": "GE", "limit": 3}) == [
        [[W + 1, 2, "c"], [W + 2, 1, "w"]]]


@pytest.mark.parametrize("name, args, code, message", [
    ("box.space.kv:insert", [W, 1, "a"], ER_TUPLE_NOT_ARRAY, "Tuple/Key must be MsgPack array"),
    ("box.space.kv:insert", [], ER_TUPLE_NOT_ARRAY, "Tuple/Key must be MsgPack array"),
    ("box.space.kv:replace", [{"a": 1}], ER_TUPLE_NOT_ARRAY, "Tuple/Key must be MsgPack array"),
    ("box.space.kv:update", [[W]], ER_PROC_LUA, "Usage index:update(key, ops)"),
    ("box.space.kv:update", [[W], "x"], ER_PROC_LUA, "Usage index:update(key, ops)"),
    ("box.space.kv:update", [[W], {"a": 1}], ER_TUPLE_NOT_ARRAY,
     "Tuple/Key must be MsgPack array"),
    ("box.space.kv:update", [[W, 2], [["=", 3, "z"]]], ER_EXACT_MATCH,
     "Invalid key part count in an exact match (expected 1, got 2)"),
    ("box.space.kv:upsert", [[W, 1, "u"]], ER_PROC_LUA, "Usage space:upsert(tuple_key, ops)"),
    ("box.space.kv:upsert", ["x", [["=", 3, "w"]]], ER_PROC_LUA,
     "Usage space:upsert(tuple_key, ops)"),
    ("box.space.kv:upsert", [[W, 1, "u"], {"a": 1}], ER_TUPLE_NOT_ARRAY,
     "Tuple/Key must be MsgPack array"),
    ("box.space.kv:delete", [], ER_EXACT_MATCH,
     "Invalid key part count in an exact match (expected 1, got 0)"),
    ("box.space.kv:delete", [{"a": 1}], ER_TUPLE_NOT_ARRAY, "Tuple/Key must be MsgPack array"),
    ("box.space.kv:delete", ["x"], ER_KEY_PART_TYPE,
     "Supplied key type of part 0 does not match index part type: expected unsigned"),
    ("box.space.customers.index.composite:delete", [[1]], ER_MORE_THAN_ONE_TUPLE,
     "Get() doesn't support partial keys and non-unique indexes"),
    ("box.space.kv.index.primary:insert", [[W, 1, "a"]], ER_NO_SUCH_PROC,
     "Procedure 'box.space.kv.index.primary:insert' is not defined"),
    ("box.space._vspace:insert", [[999, 1, "x", "memtx", 0, {}, []]], ER_VIEW_IS_RO,
     "View '_vspace' is read-only"),
])
def test_write_errors_are_tarantools(conn, kv_writes, name, args, code, message):
    assert error_of(conn, name, *args) == (code, message)


def test_write_errors_worded_by_the_version(conn, kv_writes):
    # 2.11 names the field (tarn's words); 2.6 does not: the code is what both share.
    assert error_of(conn, "box.space.kv:insert", [W])[0] == ER_FIELD_MISSING
    assert error_of(conn, "box.space.kv:insert", [])[0] == ER_FIELD_MISSING


ER_TRUNCATE_SYSTEM_SPACE = 137


def test_truncate_empties_the_space_on_every_shard(conn, key_range):
    # `customers` rows of this module's ids only would not tell an emptied space: the whole
    # space is truncated here, so the rows of other tests' ranges must be gone too. Their
    # fixtures purge by range, which an empty space satisfies.
    key_range("customers", 30010, 30030)
    for i in range(30010, 30030):
        conn.insert("customers", [i, i, A + 7, 1, 1, 1, "t"])
    assert call(conn, "box.space.customers:len")[0] >= 20
    assert call(conn, "box.space.customers:truncate", 1, 2) == []
    assert call(conn, "box.space.customers:len") == [0]
    assert call(conn, "box.space.customers.index.composite:select", [A + 7]) == [[]]
    assert error_of(conn, "box.space._space:truncate") == (
        ER_TRUNCATE_SYSTEM_SPACE, "Can't truncate a system space, space '_space'")
    assert error_of(conn, "box.space._vspace:truncate") == (
        ER_TRUNCATE_SYSTEM_SPACE, "Can't truncate a system space, space '_vspace'")
    assert error_of(conn, "box.space.kv.index.primary:truncate")[0] == ER_NO_SUCH_PROC
