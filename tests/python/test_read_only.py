"""A read-only instance through the Python connector: every write refused with
ER_READONLY (7) and Tarantool 2.6's text, after the checks Tarantool makes first; reads
served; ``box.info.ro`` true (docs/tarantool-reference.md (p)).

Runs only against a read-only server, and is skipped against a writable one (the rest of
the suite needs writes): tarn started with ``--read-only`` (``tests/read_only.rs`` does it),
or the reference Tarantool started with ``TARANTOOL_READ_ONLY=1
scripts/tarantool/start.sh PORT``. Passes against both, with the deliberate differences
below: ``box.schema.space.create`` of a space that exists with ``if_not_exists`` answers its
row in tarn (Tarantool fails to encode the space object, 32), and ``format()`` without an
argument is 5 in tarn.
"""

import pytest
import tarantool

ER_ILLEGAL_PARAMS = 1
ER_READONLY = 7
ER_SPACE_EXISTS = 10
ER_TUPLE_NOT_ARRAY = 22
ER_PROC_LUA = 32
ER_NO_SUCH_PROC = 33
ER_NO_SUCH_SPACE = 36
ER_INDEX_EXISTS = 85

READ_ONLY = (ER_READONLY, "Can't modify data because this instance is in read-only mode.")


@pytest.fixture(scope="module", autouse=True)
def read_only_server(conn):
    if not conn.call("box.info").data[0]["ro"]:
        pytest.skip("the server is writable: run this file against tarn --read-only, or "
                    "Tarantool with box.cfg{read_only = true}")


def error_of(action):
    with pytest.raises(tarantool.error.DatabaseError) as raised:
        action()
    return raised.value.args[0], raised.value.args[1]


def call_error(conn, name, *args):
    return error_of(lambda: conn.call(name, list(args)))


def test_box_info_says_read_only_and_running(conn):
    info = conn.call("box.info").data[0]
    assert info["ro"] is True
    assert info["status"] == "running"


def test_iproto_writes_are_refused_for_every_user(conn, bench_conn):
    for c in (conn, bench_conn):
        kv = c.space("kv")
        assert error_of(lambda: kv.insert([90100, 1, "a"])) == READ_ONLY
        # Before the tuple is checked: a wrong type, or a duplicate, is still 7.
        assert error_of(lambda: kv.insert(["x"])) == READ_ONLY
        assert error_of(lambda: kv.replace([90100, 1, "a"])) == READ_ONLY
        assert error_of(lambda: kv.update(90100, [("=", 2, "z")])) == READ_ONLY
        assert error_of(lambda: kv.delete(90100)) == READ_ONLY
        assert error_of(lambda: kv.upsert([90100, 1, "a"], [("=", 2, "z")])) == READ_ONLY
        # A missing space is 36 first; a view or a system space is 7.
        assert error_of(lambda: c.insert(9999, [1])) == (
            ER_NO_SUCH_SPACE, "Space '9999' does not exist")
        assert error_of(lambda: c.insert(281, [1])) == READ_ONLY


def test_box_space_writes_over_call_are_refused_after_their_arguments(conn):
    for name, args in [
        ("box.space.kv:insert", [[90100, 1, "a"]]),
        ("box.space.kv:replace", [[90100, 1, "a"]]),
        ("box.space.kv:put", [[90100, 1, "a"]]),
        ("box.space.kv:update", [[90100], [["=", 3, "z"]]]),
        ("box.space.kv:upsert", [[90100, 1, "a"], [["=", 3, "z"]]]),
        ("box.space.kv:delete", [[90100]]),
        ("box.space.kv.index.primary:delete", [[90100]]),
        ("box.space.kv:truncate", []),
        ("box.space._space:truncate", []),
    ]:
        assert call_error(conn, name, *args) == READ_ONLY, name
    assert call_error(conn, "box.space.kv:insert", 90100, 1, "a") == (
        ER_TUPLE_NOT_ARRAY, "Tuple/Key must be MsgPack array")
    assert call_error(conn, "box.space.kv:update", [90100]) == (
        ER_PROC_LUA, "Usage index:update(key, ops)")


def test_ddl_is_refused_after_its_arguments_are_checked(bench_conn):
    c = bench_conn
    assert call_error(c, "box.schema.space.create", "ro_t1", {"id": 600}) == READ_ONLY
    assert call_error(c, "box.schema.space.create", "ro_t2", {
        "id": 601, "format": [{"name": "id", "type": "bogus"}]}) == READ_ONLY
    assert call_error(c, "box.schema.space.create", "kv") == (
        ER_SPACE_EXISTS, "Space 'kv' already exists")
    assert call_error(c, "box.schema.space.create", "ro_t3", {"bogus": 1}) == (
        ER_ILLEGAL_PARAMS, "Illegal parameters, unexpected option 'bogus'")
    assert call_error(c, "box.space.kv:create_index", "by_value",
                      {"parts": [3], "unique": False}) == READ_ONLY
    assert call_error(c, "box.space.kv:create_index", "primary") == (
        ER_INDEX_EXISTS, "Index 'primary' already exists")
    not_created = c.call("box.space.kv:create_index", ["primary", {"if_not_exists": True}])
    assert not_created.data[1] == "not created"
    assert call_error(c, "box.space.kv:format", [{"name": "id", "type": "unsigned"}]) \
        == READ_ONLY
    assert call_error(c, "box.space.kv:rename", "kv2") == READ_ONLY
    assert call_error(c, "box.space.kv:drop") == READ_ONLY
    assert call_error(c, "box.space.kv.index.primary:drop") == READ_ONLY
    assert call_error(c, "box.space.kv.index.primary:alter", {"name": "pk"}) == READ_ONLY
    assert call_error(c, "box.space.nope:drop") == (
        ER_NO_SUCH_PROC, "Procedure 'box.space.nope:drop' is not defined")


def test_reads_are_served(conn):
    rows = conn.select("kv").data
    assert isinstance(rows, list)
    if rows:
        first = rows[0]
        assert conn.select("kv", [first[0]]).data == [first]
        assert conn.call("box.space.kv:get", [[first[0]]]).data == [first]
    assert conn.call("box.space.kv:len", []).data == [len(rows)]
    assert conn.call("box.space.kv:select", [[]]).data == [rows]
