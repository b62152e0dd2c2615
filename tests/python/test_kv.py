"""CRUD on space ``kv`` through the Python connector (box API over IPROTO).

Field numbers in update/upsert operations are 0-based on the wire: the Python
connector sends them unchanged (only field *names* are translated, to 0-based
ids, from the schema it fetched from _vspace).
"""

import pytest
from tarantool.const import (ITERATOR_ALL, ITERATOR_EQ, ITERATOR_GE, ITERATOR_GT,
                             ITERATOR_LE, ITERATOR_LT, ITERATOR_REQ)
from tarantool.error import DatabaseError

ER_KEY_PART_TYPE = 18
ER_EXACT_MATCH = 19
ER_FIELD_TYPE = 23
ER_KEY_PART_COUNT = 31
ER_NO_SUCH_SPACE = 36
ER_FIELD_MISSING = 39
ER_TUPLE_FOUND = 3
ER_CANT_UPDATE_PRIMARY_KEY = 94


def test_ping(conn):
    assert conn.ping(notime=True) == "Success"


def test_space_metadata_from_schema(conn):
    # conn.space() resolves names through the _vspace/_vindex rows it loaded.
    kv = conn.space("kv")
    assert kv.space_no == 512
    assert conn.space("customers").space_no == 513
    assert conn.schema.get_space("kv").format["value"]["id"] == 2
    assert conn.schema.get_index("customers", "composite").iid == 1
    assert conn.schema.get_index("customers", "bucket_id").iid == 2


def test_insert_and_select(conn, key_range):
    key_range("kv", 1000, 1100)
    kv = conn.space("kv")
    assert kv.insert((1000, 7, "a")).data == [[1000, 7, "a"]]
    assert kv.insert((1001, 8, "")).data == [[1001, 8, ""]]
    # Extra fields beyond the format are allowed and stored as given.
    assert kv.insert((1002, 9, "c", "extra", [1, 2])).data == [[1002, 9, "c", "extra", [1, 2]]]

    assert kv.select(1000).data == [[1000, 7, "a"]]
    assert kv.select([1001]).data == [[1001, 8, ""]]
    assert kv.select(1099).data == []
    assert conn.select("kv", 1000, limit=0).data == []
    # By numeric space id, too.
    assert conn.select(512, 1002).data == [[1002, 9, "c", "extra", [1, 2]]]


def test_duplicate_insert_raises_code_3(conn, key_range):
    key_range("kv", 1100, 1150)
    kv = conn.space("kv")
    kv.insert((1100, 1, "first"))
    with pytest.raises(DatabaseError) as exc:
        kv.insert((1100, 2, "second"))
    assert exc.value.code == ER_TUPLE_FOUND
    # 2.6: ... index 'primary' in space 'kv'; 2.11: ... index "primary" in space "kv" with old tuple ...
    assert exc.value.message.startswith("Duplicate key exists in unique index ")
    assert "primary" in exc.value.message and "kv" in exc.value.message
    # The failed insert changed nothing.
    assert kv.select(1100).data == [[1100, 1, "first"]]


def test_replace(conn, key_range):
    key_range("kv", 1150, 1200)
    kv = conn.space("kv")
    assert kv.replace((1150, 1, "one")).data == [[1150, 1, "one"]]
    assert kv.replace((1150, 2, "two")).data == [[1150, 2, "two"]]
    assert kv.select(1150).data == [[1150, 2, "two"]]


def test_update(conn, key_range):
    key_range("kv", 1200, 1300)
    kv = conn.space("kv")
    kv.insert((1200, 5, "hello"))

    assert kv.update(1200, [("+", 1, 3)]).data == [[1200, 8, "hello"]]
    assert kv.update(1200, [("-", 1, 2)]).data == [[1200, 6, "hello"]]
    assert kv.update(1200, [("|", 1, 1)]).data == [[1200, 7, "hello"]]
    # Splice: 0-based offset 1, cut 2 characters, insert "XY".
    assert kv.update(1200, [(":", 2, 1, 2, "XY")]).data == [[1200, 7, "hXYlo"]]
    # By field name; several ops apply in order.
    assert kv.update(1200, [("=", "value", "v1"), ("=", "value", "v2")]).data == [[1200, 7, "v2"]]
    # Append and delete a trailing field.
    assert kv.update(1200, [("!", 3, "tail")]).data == [[1200, 7, "v2", "tail"]]
    assert kv.update(1200, [("#", 3, 1)]).data == [[1200, 7, "v2"]]
    # Assigning the same primary-key value is allowed.
    assert kv.update(1200, [("=", 0, 1200)]).data == [[1200, 7, "v2"]]

    assert kv.select(1200).data == [[1200, 7, "v2"]]


def test_update_missing_key_returns_nothing(conn, key_range):
    key_range("kv", 1250, 1260)
    assert conn.space("kv").update(1250, [("=", 2, "x")]).data == []
    assert conn.space("kv").select(1250).data == []


def test_update_primary_key_field_raises_94(conn, key_range):
    key_range("kv", 1260, 1270)
    kv = conn.space("kv")
    kv.insert((1260, 1, "pk"))
    with pytest.raises(DatabaseError) as exc:
        kv.update(1260, [("=", 0, 1261)])
    assert exc.value.code == ER_CANT_UPDATE_PRIMARY_KEY
    assert kv.select(1260).data == [[1260, 1, "pk"]]
    assert kv.select(1261).data == []


def test_upsert(conn, key_range):
    key_range("kv", 1300, 1400)
    kv = conn.space("kv")
    # Absent: the tuple is inserted as given; the reply is always empty.
    assert kv.upsert((1300, 1, "new"), [("+", 1, 10)]).data == []
    assert kv.select(1300).data == [[1300, 1, "new"]]
    # Present: the operations are applied to the existing tuple.
    assert kv.upsert((1300, 99, "ignored"), [("+", 1, 10), ("=", 2, "upd")]).data == []
    assert kv.select(1300).data == [[1300, 11, "upd"]]
    # An operation failing at execution time on an existing tuple is skipped
    # (Tarantool logs it); the remaining operations still apply; no error.
    assert kv.upsert((1300, 0, "x"), [("+", 2, 1), ("=", 1, 12)]).data == []
    assert kv.select(1300).data == [[1300, 12, "upd"]]


def test_delete(conn, key_range):
    key_range("kv", 1400, 1500)
    kv = conn.space("kv")
    kv.insert((1400, 3, "gone"))
    assert kv.delete(1400).data == [[1400, 3, "gone"]]
    assert kv.select(1400).data == []
    # Deleting a missing key is not an error.
    assert kv.delete(1400).data == []
    assert kv.delete([1401]).data == []


def test_select_iterators_on_primary(conn, key_range):
    key_range("kv", 1500, 1600)
    kv = conn.space("kv")
    for i in range(1500, 1510):
        kv.insert((i, i % 3, f"v{i}"))

    ids = lambda resp: [t[0] for t in resp.data]  # noqa: E731
    assert ids(kv.select(1505, iterator=ITERATOR_GE, limit=3)) == [1505, 1506, 1507]
    assert ids(kv.select(1505, iterator=ITERATOR_GT, limit=3)) == [1506, 1507, 1508]
    assert ids(kv.select(1505, iterator=ITERATOR_LE, limit=3)) == [1505, 1504, 1503]
    assert ids(kv.select(1505, iterator=ITERATOR_LT, limit=3)) == [1504, 1503, 1502]
    assert ids(kv.select(1505, iterator=ITERATOR_REQ)) == [1505]
    assert ids(kv.select(1505, iterator=ITERATOR_ALL, limit=2)) == [1505, 1506]
    assert ids(kv.select(1500, iterator=ITERATOR_GE, offset=2, limit=3)) == [1502, 1503, 1504]
    assert ids(kv.select(1509, iterator=ITERATOR_LE, offset=8, limit=5)) == [1501, 1500]
    assert kv.select(1505, iterator=ITERATOR_EQ).data == [[1505, 2, "v1505"]]


def test_key_and_tuple_errors(conn, key_range):
    key_range("kv", 1700, 1800)
    kv = conn.space("kv")

    with pytest.raises(DatabaseError) as exc:
        kv.select("abc")
    assert exc.value.code == ER_KEY_PART_TYPE
    assert exc.value.message == (
        "Supplied key type of part 0 does not match index part type: expected unsigned")

    with pytest.raises(DatabaseError) as exc:
        kv.select([1700, 1])
    assert exc.value.code == ER_KEY_PART_COUNT
    assert exc.value.message == "Invalid key part count (expected [0..1], got 2)"

    with pytest.raises(DatabaseError) as exc:
        kv.delete([])
    assert exc.value.code == ER_EXACT_MATCH
    assert exc.value.message == "Invalid key part count in an exact match (expected 1, got 0)"

    with pytest.raises(DatabaseError) as exc:
        kv.insert((1700, "not-a-number", "v"))
    assert exc.value.code == ER_FIELD_TYPE
    # 2.6: "Tuple field 2 type does not match ..."; 2.10+: "Tuple field 2 (bucket_id) type ..."
    assert exc.value.message.startswith("Tuple field 2 ")

    with pytest.raises(DatabaseError) as exc:
        kv.insert((1701, 1))
    assert exc.value.code == ER_FIELD_MISSING
    assert exc.value.message.startswith("Tuple field 3 ")

    assert kv.select(1700, iterator=ITERATOR_GE, limit=2).data == []

    with pytest.raises(DatabaseError) as exc:
        conn.select(9999, [])
    assert exc.value.code == ER_NO_SUCH_SPACE
    assert exc.value.message == "Space '9999' does not exist"


def test_error_keeps_connection_usable(conn, key_range):
    key_range("kv", 1800, 1810)
    kv = conn.space("kv")
    with pytest.raises(DatabaseError):
        kv.insert(("bad", 1, "v"))
    assert kv.insert((1800, 1, "ok")).data == [[1800, 1, "ok"]]

