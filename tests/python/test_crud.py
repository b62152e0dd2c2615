"""The crud API through the Python connector's ``crud_*`` helpers (issue 6).

Runnable once ``crud.*`` CALLs are routed to ``crud`` (see its module docs).
Uses space ``kv`` (id unsigned, bucket_id unsigned, value string) with primary keys
in [40000, 41200) only.  ``crud_truncate`` is not exercised: it would empty the
space under the other tests.
"""

import pytest
from tarantool.error import CrudModuleError, CrudModuleManyError, DatabaseError

ER_PROC_LUA = 32
LO, HI = 40000, 41200


def tarantool_crc32(data: bytes) -> int:
    """Tarantool's digest.crc32: CRC-32C, register starts at 0xFFFFFFFF, no final xor."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc


def bucket_id(pk, bucket_count=3000):
    return tarantool_crc32(str(pk).encode()) % bucket_count + 1


def test_bucket_formula_matches_the_spec_vectors():
    assert [bucket_id(k) for k in (10, 14, 50, 1)] == [569, 56, 1965, 477]


@pytest.fixture
def kv(conn, key_range):
    key_range("kv", LO, HI)
    return conn


def test_point_operations(kv):
    res = kv.crud_insert("kv", [LO, None, "a"])
    assert [m["name"] for m in res.metadata] == ["id", "bucket_id", "value"]
    assert res.rows == [[LO, bucket_id(LO), "a"]]
    assert kv.crud_get("kv", LO).rows == [[LO, bucket_id(LO), "a"]]
    assert kv.crud_get("kv", LO + 1).rows == []
    assert kv.crud_update("kv", LO, [["=", 3, "b"]]).rows == [[LO, bucket_id(LO), "b"]]
    assert kv.crud_update("kv", LO, [["=", "value", "c"]], {"fields": ["value"]}).rows == [["c"]]
    assert kv.crud_replace("kv", [LO, 7, "d"]).rows == [[LO, 7, "d"]]
    assert kv.crud_upsert("kv", [LO + 1, None, "e"], [["=", 3, "f"]]).rows == []
    assert kv.crud_insert_object("kv", {"id": LO + 2, "value": "g"}).rows == [
        [LO + 2, bucket_id(LO + 2), "g"]]
    assert kv.crud_delete("kv", LO).rows == [[LO, 7, "d"]]


def test_returned_and_raised_errors(kv):
    kv.crud_insert("kv", [LO + 10, None, "a"])
    with pytest.raises(CrudModuleError) as exc:
        kv.crud_insert("kv", [LO + 10, None, "a"])
    assert exc.value.extra_info_error.class_name == "InsertError"
    assert exc.value.extra_info_error.err.startswith("Failed to insert: Duplicate key exists")
    with pytest.raises(CrudModuleError) as exc:
        kv.crud_get("nospace", 1)
    assert exc.value.extra_info_error.err == 'Space "nospace" doesn\'t exist'
    with pytest.raises(DatabaseError) as exc:
        kv.crud_get("kv", 1, {"badopt": 1})
    assert exc.value.code == ER_PROC_LUA
    assert str(exc.value.message).endswith("unexpected argument opts.badopt to nil")


def test_select_conditions_and_pagination_both_ways(kv):
    ids = list(range(LO + 100, LO + 1100))
    for start in range(0, len(ids), 100):
        kv.crud_insert_many("kv", [[i, None, str(i)] for i in ids[start:start + 100]])
    cond = [[">=", "id", LO + 100], ["<", "id", LO + 1100]]
    assert kv.crud_count("kv", cond) == 1000

    seen, after = [], None
    while True:
        opts = {"first": 100}
        if after is not None:
            opts["after"] = after
        rows = kv.crud_select("kv", cond, opts).rows
        seen += [r[0] for r in rows]
        if len(rows) < 100:
            break
        after = rows[-1]
    assert seen == ids

    after = kv.crud_get("kv", ids[-1]).rows[0]
    back = [after[0]]
    while True:
        rows = kv.crud_select("kv", cond, {"first": -100, "after": after}).rows
        back = [r[0] for r in rows] + back
        if len(rows) < 100:
            break
        after = rows[0]
    assert back == ids

    desc = kv.crud_select("kv", [["<", "id", LO + 110]], {"first": 3}).rows
    assert [r[0] for r in desc] == [LO + 109, LO + 108, LO + 107]
    res = kv.crud_select("kv", [["==", "id", LO + 100]], {"fields": ["value"]})
    assert [m["name"] for m in res.metadata] == ["value", "id"]
    assert res.rows == [[str(LO + 100), LO + 100]]


def test_many_with_stop_on_error(kv):
    kv.crud_insert("kv", [LO + 1150, None, "x"])
    with pytest.raises(CrudModuleManyError) as exc:
        kv.crud_insert_many("kv", [[LO + 1151, None, "a"], [LO + 1150, None, "dup"],
                                   [LO + 1152, None, "b"]], {"stop_on_error": True})
    assert [r[0] for r in exc.value.success_list.rows] == [LO + 1151]
    errors = exc.value.errors_list
    assert [e.operation_data[0] for e in errors] == [LO + 1150, LO + 1152]
    assert errors[1].err.endswith("Operation with tuple was not performed")
    assert kv.crud_get("kv", LO + 1152).rows == []


def test_len_min_max_storage_info(kv):
    kv.crud_insert("kv", [LO + 1199, None, "z"])
    assert kv.crud_len("kv") >= 1
    assert kv.crud_max("kv", "primary").rows[0][0] >= LO + 1199
    info = kv.crud_storage_info()
    assert all(v["status"] == "running" for v in info.values())
