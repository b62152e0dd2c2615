"""Secondary-index selects on space ``customers``.

Index ``composite`` (iid 1) is a non-unique TREE on (a, b, c, d, name); ties are
ordered by the primary key.  Index ``bucket_id`` (iid 2) is a non-unique TREE.
"""

import pytest
from tarantool.const import (ITERATOR_ALL, ITERATOR_EQ, ITERATOR_GE, ITERATOR_GT,
                             ITERATOR_LE, ITERATOR_LT, ITERATOR_REQ)
from tarantool.error import DatabaseError

ER_KEY_PART_TYPE = 18
ER_KEY_PART_COUNT = 31
ER_MORE_THAN_ONE_TUPLE = 41

A = 700100  # value of field `a` used only by this module
BUCKET = 900100  # bucket_id used only by this module

ROWS = [
    # id,    bucket_id,  a,     b, c, d, name
    (20001, BUCKET, A, 1, 1, 1, "x"),
    (20002, 2, A, 1, 1, 2, "a"),
    (20003, 3, A, 1, 2, 0, "b"),
    (20004, 4, A, 2, 0, 0, "c"),
    (20005, BUCKET, A, 1, 1, 1, "x"),  # same composite key as 20001
    (20006, 6, A + 1, 0, 0, 0, "z"),
]


@pytest.fixture
def customers(conn, key_range):
    key_range("customers", 20000, 20100)
    sp = conn.space("customers")
    for row in ROWS:
        assert sp.insert(row).data == [list(row)]
    return sp


def ids(resp):
    return [t[0] for t in resp.data]


def test_composite_partial_key_eq(customers):
    resp = customers.select([A, 1], index="composite")
    assert resp.data == [
        [20001, BUCKET, A, 1, 1, 1, "x"],
        [20005, BUCKET, A, 1, 1, 1, "x"],
        [20002, 2, A, 1, 1, 2, "a"],
        [20003, 3, A, 1, 2, 0, "b"],
    ]
    assert ids(customers.select([A], index="composite")) == [20001, 20005, 20002, 20003, 20004]
    assert ids(customers.select([A, 1, 1, 1, "x"], index="composite")) == [20001, 20005]
    assert customers.select([A, 9], index="composite").data == []
    # By index id instead of name.
    assert ids(customers.select([A, 1], index=1, iterator=ITERATOR_EQ)) == [20001, 20005, 20002, 20003]


def test_composite_iterators(customers):
    assert ids(customers.select([A, 1], index="composite", iterator=ITERATOR_REQ)) == [
        20003, 20002, 20005, 20001]
    assert ids(customers.select([A, 1], index="composite", iterator=ITERATOR_GT, limit=2)) == [
        20004, 20006]
    assert ids(customers.select([A, 1, 1], index="composite", iterator=ITERATOR_GE, limit=4)) == [
        20001, 20005, 20002, 20003]
    assert ids(customers.select([A, 1, 1, 2], index="composite", iterator=ITERATOR_LT, limit=2)) == [
        20005, 20001]
    assert ids(customers.select([A, 1, 1, 2], index="composite", iterator=ITERATOR_LE, limit=3)) == [
        20002, 20005, 20001]
    assert ids(customers.select([A, 2], index="composite", iterator=ITERATOR_ALL, limit=2)) == [
        20004, 20006]
    assert ids(customers.select([A], index="composite", offset=1, limit=2)) == [20005, 20002]


def test_bucket_id_index(customers):
    assert ids(customers.select(BUCKET, index="bucket_id")) == [20001, 20005]
    assert ids(customers.select([BUCKET], index=2, iterator=ITERATOR_REQ)) == [20005, 20001]
    assert customers.select(BUCKET + 1, index="bucket_id").data == []


def test_composite_key_errors(customers):
    with pytest.raises(DatabaseError) as exc:
        customers.select([A, "one"], index="composite")
    assert exc.value.code == ER_KEY_PART_TYPE
    assert exc.value.message == (
        "Supplied key type of part 1 does not match index part type: expected unsigned")

    with pytest.raises(DatabaseError) as exc:
        customers.select([A, 1, 1, 1, "x", 1], index="composite")
    assert exc.value.code == ER_KEY_PART_COUNT
    assert exc.value.message == "Invalid key part count (expected [0..5], got 6)"

    # Exact-match operations need a unique index.
    with pytest.raises(DatabaseError) as exc:
        customers.delete([A, 1, 1, 1, "x"], index="composite")
    assert exc.value.code == ER_MORE_THAN_ONE_TUPLE
    assert exc.value.message == "Get() doesn't support partial keys and non-unique indexes"


def test_update_through_primary_keeps_secondary_in_sync(customers):
    customers.update(20005, [("=", 3, 5)])  # b := 5 (0-based field 3)
    assert ids(customers.select([A, 1, 1, 1, "x"], index="composite")) == [20001]
    assert ids(customers.select([A, 5], index="composite")) == [20005]
