"""DDL over CALL, as a migration runs it through the Python connector: a space made, given
indexes, filled, read by a connection opened before the change, renamed and dropped; the
errors of each step with Tarantool's codes and texts (docs/tarantool-reference.md (o)).

Passes against tarn and against Tarantool 2.6, with the deliberate differences below:
``box.schema.space.create`` answers the new ``_space`` row in tarn, where Tarantool makes
the space and then fails to encode the object it returns (32); tarn refuses a unique
secondary index on a space spread over its shards.
"""

import pytest
import tarantool

ER_TUPLE_FOUND = 3
ER_SPACE_EXISTS = 10
ER_DROP_PRIMARY_KEY = 17
ER_PROC_LUA = 32
ER_NO_SUCH_PROC = 33
ER_INDEX_EXISTS = 85


@pytest.fixture(scope="module")
def is_tarn(conn):
    return not conn.call("box.info").data[0]["version"].startswith("2.6")


def call(conn, name, *args):
    return conn.call(name, list(args)).data


def error_of(conn, name, *args):
    with pytest.raises(tarantool.error.DatabaseError) as raised:
        conn.call(name, list(args))
    return raised.value.args[0], raised.value.args[1]


def drop_if_there(conn, space):
    try:
        conn.call("box.space.%s:drop" % space, [])
    except tarantool.error.DatabaseError as error:
        assert error.args[0] == ER_NO_SUCH_PROC


def create_space(conn, is_tarn, name, opts):
    """box.schema.space.create; the new space's id."""
    if is_tarn:
        row = call(conn, "box.schema.space.create", name, opts)[0]
        assert row[2:5] == [name, "memtx", 0]
        return row[0]
    assert error_of(conn, "box.schema.space.create", name, opts) == (
        ER_PROC_LUA, "unsupported Lua type 'function'")
    return conn.select("_vspace", [name], index="name").data[0][0]


FORMAT = [{"name": "id", "type": "unsigned"}, {"name": "v", "type": "string"}]


def test_a_space_made_over_call_serves_a_connection_opened_before(conn, bench_conn, is_tarn):
    drop_if_there(bench_conn, "ddl_a")
    drop_if_there(bench_conn, "ddl_a2")
    # The old connection has read the schema before the change.
    conn.select("kv", [0])
    # Explicit ids: Tarantool picks the next from a counter that the reference instance's
    # spaces (made with ids 512 and 513) did not move.
    space_id = create_space(bench_conn, is_tarn, "ddl_a", {"format": FORMAT, "id": 600})
    assert error_of(bench_conn, "box.schema.space.create", "ddl_a") == (
        ER_SPACE_EXISTS, "Space 'ddl_a' already exists")
    before = bench_conn.call("box.info").schema_version
    primary = call(bench_conn, "box.space.ddl_a:create_index", "pk")
    # Every change moves the version replies carry; requests that carry the old one get
    # ER_WRONG_SCHEMA_VERSION, on which the connector reloads the schema and retries.
    assert bench_conn.call("box.info").schema_version > before
    assert primary == [{
        "unique": True, "id": 0, "space_id": space_id, "type": "TREE", "name": "pk",
        "parts": [{"type": "unsigned", "is_nullable": False, "fieldno": 1}],
    }]
    for i in range(6):
        conn.insert("ddl_a", [i, "v%d" % (i % 2)])
    by_v = call(bench_conn, "box.space.ddl_a:create_index", "by_v",
                {"parts": ["v"], "unique": False})
    assert by_v[0]["id"] == 1 and by_v[0]["parts"][0]["fieldno"] == 2
    # The connection opened before selects by the new index's name.
    assert conn.select("ddl_a", ["v1"], index="by_v").data == [[1, "v1"], [3, "v1"], [5, "v1"]]
    assert call(bench_conn, "box.space.ddl_a:create_index", "by_v",
                {"if_not_exists": True})[1] == "not created"
    assert call(bench_conn, "box.space.ddl_a.index.by_v:drop") == []
    assert error_of(bench_conn, "box.space.ddl_a.index.by_v:drop") == (
        ER_NO_SUCH_PROC, "Procedure 'box.space.ddl_a.index.by_v:drop' is not defined")
    assert call(bench_conn, "box.space.ddl_a:rename", "ddl_a2") == []
    assert conn.select("ddl_a2", [4]).data == [[4, "v0"]]
    assert call(bench_conn, "box.space.ddl_a2:drop") == []
    assert error_of(bench_conn, "box.space.ddl_a2:drop") == (
        ER_NO_SUCH_PROC, "Procedure 'box.space.ddl_a2:drop' is not defined")
    assert conn.select("_vspace", [space_id]).data == []
    assert conn.select("_vindex", [space_id]).data == []


def test_ddl_errors_as_tarantool_words_them(conn, bench_conn, is_tarn):
    drop_if_there(bench_conn, "ddl_b")
    create_space(bench_conn, is_tarn, "ddl_b", {"format": FORMAT, "id": 601})
    call(bench_conn, "box.space.ddl_b:create_index", "pk")
    call(bench_conn, "box.space.ddl_b:create_index", "by_v", {"parts": [2, "string"],
                                                            "unique": False})
    for i in range(3):
        conn.insert("ddl_b", [i, "same"])
    assert error_of(bench_conn, "box.space.ddl_b:create_index", "pk") == (
        ER_INDEX_EXISTS, "Index 'pk' already exists")
    assert error_of(bench_conn, "box.space.ddl_b.index.pk:drop") == (
        ER_DROP_PRIMARY_KEY, "Can't drop primary key in space 'ddl_b' while secondary keys exist")
    assert error_of(bench_conn, "box.space.ddl_b:rename", "kv") == (
        ER_TUPLE_FOUND, "Duplicate key exists in unique index 'name' in space '_space'")
    assert error_of(bench_conn, "box.space.ddl_b:create_index", "bad", {"bogus": 1}) == (
        1, "Illegal parameters, unexpected option 'bogus'")
    # The failed build changed nothing.
    assert [row[2] for row in conn.select("_vindex", [conn.space("ddl_b").space_no]).data] == [
        "pk", "by_v"]
    assert call(bench_conn, "box.space.ddl_b:drop") == []


def test_a_format_the_data_violates_changes_nothing_on_any_shard(conn, bench_conn, is_tarn):
    drop_if_there(bench_conn, "ddl_c")
    create_space(bench_conn, is_tarn, "ddl_c", {"format": FORMAT, "id": 602})
    call(bench_conn, "box.space.ddl_c:create_index", "pk")
    for i in range(8):
        conn.insert("ddl_c", [i, "v%d" % i])
    code, message = error_of(bench_conn, "box.space.ddl_c:format",
                             [FORMAT[0], {"name": "v", "type": "unsigned"}])
    # 2.6 and 2.11 word it apart (the field's name, the type found): the start is the same.
    assert code == 23 and message.startswith("Tuple field 2")
    assert conn.select("_vspace", ["ddl_c"], index="name").data[0][6] == FORMAT
    wider = FORMAT + [{"name": "n", "type": "string", "is_nullable": True}]
    assert call(bench_conn, "box.space.ddl_c:format", wider) == []
    assert conn.select("_vspace", ["ddl_c"], index="name").data[0][6] == wider
    assert conn.select("ddl_c", []).data == [[i, "v%d" % i] for i in range(8)]
    assert call(bench_conn, "box.space.ddl_c:drop") == []


def test_tarn_refuses_a_unique_secondary_index_on_a_spread_space(conn, bench_conn, is_tarn):
    if not is_tarn:
        pytest.skip("tarn's rule: Tarantool has one shard")
    drop_if_there(bench_conn, "ddl_d")
    create_space(bench_conn, is_tarn, "ddl_d", {"format": FORMAT, "id": 603})
    call(bench_conn, "box.space.ddl_d:create_index", "pk")
    code, message = error_of(bench_conn, "box.space.ddl_d:create_index", "uv",
                             {"parts": ["v"]})
    assert code == 14 and "a unique secondary index needs the whole space" in message
    assert call(bench_conn, "box.space.ddl_d:drop") == []


def test_index_alter_as_tarantool_answers_it(conn, bench_conn, is_tarn):
    drop_if_there(bench_conn, "ddl_e")
    fmt = [{"name": "id", "type": "unsigned"}, {"name": "g", "type": "unsigned"},
           {"name": "s", "type": "string"}]
    create_space(bench_conn, is_tarn, "ddl_e", {"format": fmt, "id": 604})
    call(bench_conn, "box.space.ddl_e:create_index", "pk")
    call(bench_conn, "box.space.ddl_e:create_index", "g", {"parts": ["g"], "unique": False})
    for row in ([1, 1, "a"], [2, 1, "b"], [3, 2, "c"]):
        conn.insert("ddl_e", row)
    assert call(bench_conn, "box.space.ddl_e.index.g:alter", {"name": "g2"}) == []
    assert conn.select("_vindex", [604]).data[1][2:6] == [
        "g2", "tree", {"unique": False}, [[1, "unsigned"]]]
    # New parts: the index is rebuilt over the tuples, and read under its new name by a
    # connection that loaded the schema before.
    assert call(bench_conn, "box.space.ddl_e.index.g2:alter", {"parts": ["s"]}) == []
    assert conn.select("ddl_e", ["b"], index="g2").data == [[2, 1, "b"]]
    assert call(bench_conn, "box.space.ddl_e.index.g2:alter") == []
    assert error_of(bench_conn, "box.space.ddl_e.index.g2:alter", {"bogus": 1}) == (
        1, "Illegal parameters, unexpected option 'bogus'")
    assert error_of(bench_conn, "box.space.ddl_e.index.g2:alter", "x") == (
        1, "Illegal parameters, options should be a table")
    assert error_of(bench_conn, "box.space.ddl_e.index.g2:alter", {"name": "pk"}) == (
        ER_TUPLE_FOUND, "Duplicate key exists in unique index 'name' in space '_index'")
    assert error_of(bench_conn, "box.space.ddl_e.index.g2:alter", {"id": 5}) == (
        94, "Attempt to modify a tuple field which is part of index 'primary' in space '_index'")
    assert error_of(bench_conn, "box.space.ddl_e.index.pk:alter", {"unique": False}) == (
        14, "Can't create or modify index 'pk' in space 'ddl_e': primary key must be unique")
    assert error_of(bench_conn, "box.space.ddl_e.index.g2:alter", {"type": "hash",
                                                                  "unique": False}) == (
        14, "Can't create or modify index 'g2' in space 'ddl_e': HASH index must be unique")
    assert error_of(bench_conn, "box.space.ddl_e.index.nope:alter", {"name": "x"}) == (
        ER_NO_SUCH_PROC, "Procedure 'box.space.ddl_e.index.nope:alter' is not defined")
    # The failed calls changed nothing.
    assert conn.select("_vindex", [604]).data[1][2:6] == [
        "g2", "tree", {"unique": False}, [[2, "string"]]]
    assert conn.select("ddl_e", [], index="g2").data == [[1, 1, "a"], [2, 1, "b"], [3, 2, "c"]]
    assert call(bench_conn, "box.space.ddl_e:drop") == []
