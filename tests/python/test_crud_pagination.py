"""crud.select pagination over 10,000 rows (issue 6): pages of 100 through the
connector's ``crud_select`` with ``first``/``after``, forwards, backwards (negative
``first``) and down a descending scan; no row may be missed or repeated.

On two shards every page is merged from both shards' runs, so this is the test of the
fan-out merge and of ``after`` on each shard.  Uses space ``kv`` with primary keys in
[1000000, 1010000) only.
"""

import pytest

LO, HI = 1_000_000, 1_010_000
PAGE = 100
COND = [[">=", "id", LO], ["<", "id", HI]]


@pytest.fixture(scope="module")
def ten_thousand(addr):
    from conftest import _purge, connect
    conn = connect(addr)
    _purge(conn, "kv", LO, HI)
    ids = list(range(LO, HI))
    for start in range(0, len(ids), 500):
        conn.crud_insert_many("kv", [[i, None, f"v{i}"] for i in ids[start:start + 500]])
    yield conn, ids
    _purge(conn, "kv", LO, HI)
    conn.close()


def walk(conn, cond, first, after, take_after):
    """Pages until a short page; returns every row id in the order served."""
    seen, pages = [], 0
    while True:
        opts = {"first": first}
        if after is not None:
            opts["after"] = after
        rows = conn.crud_select("kv", cond, opts).rows
        pages += 1
        assert pages <= len(range(LO, HI)) // PAGE + 2, "pagination does not end"
        if first > 0:
            seen += [r[0] for r in rows]
        else:
            seen = [r[0] for r in rows] + seen
        if len(rows) < abs(first):
            return seen
        after = take_after(rows)


def test_the_rows_are_all_there(ten_thousand):
    conn, ids = ten_thousand
    assert conn.crud_count("kv", COND) == len(ids)


def test_forward_pages_of_100(ten_thousand):
    conn, ids = ten_thousand
    assert walk(conn, COND, PAGE, None, lambda rows: rows[-1]) == ids


def test_backward_pages_of_100_with_negative_first(ten_thousand):
    conn, ids = ten_thousand
    last = conn.crud_get("kv", ids[-1]).rows[0]
    back = walk(conn, COND, -PAGE, last, lambda rows: rows[0])
    assert back + [ids[-1]] == ids


def test_descending_scan_pages_of_100(ten_thousand):
    conn, ids = ten_thousand
    cond = [["<=", "id", HI - 1], [">=", "id", LO]]
    assert walk(conn, cond, PAGE, None, lambda rows: rows[-1]) == ids[::-1]


def test_pages_keep_their_rows_whole(ten_thousand):
    conn, ids = ten_thousand
    rows = conn.crud_select("kv", COND, {"first": PAGE, "after": [LO + 4999, None, ""]}).rows
    assert [r[0] for r in rows] == ids[5000:5000 + PAGE]
    assert all(r[2] == f"v{r[0]}" for r in rows)
