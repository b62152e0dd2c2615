"""asynctnt, the asyncio connector, against the server under test: it loads the schema on
connect (from ``_vspace`` and ``_vindex``), reads and writes by space and index names, and
calls ``box.space`` methods; errors arrive with Tarantool's codes. Passes against tarn and
against Tarantool 2.6 alike.
"""

import asyncio

import asynctnt
from asynctnt.exceptions import TarantoolDatabaseError, TarantoolSchemaError

LO, HI = 30201, 30206  # kv ids of this module
A = 700500  # customers' field `a`, used only here
ER_TUPLE_FOUND = 3
ER_EXACT_MATCH = 19
ER_PROC_LUA = 32
ER_NO_SUCH_PROC = 33


def run(addr, body):
    """Runs `body(conn)` on a fresh asynctnt connection to the server."""
    async def main():
        conn = asynctnt.Connection(host=addr[0], port=addr[1])
        await conn.connect()
        try:
            return await body(conn)
        finally:
            await conn.disconnect()
    return asyncio.run(main())


def rows(response):
    return [list(t) for t in response]


def test_reads_and_writes_by_names(addr, key_range):
    key_range("kv", LO, HI)

    async def body(conn):
        for i in range(LO, HI):
            assert rows(await conn.insert("kv", [i, i, "v%d" % i])) == [[i, i, "v%d" % i]]
        try:
            await conn.insert("kv", [LO, 0, "again"])
            raise AssertionError("a duplicate was stored")
        except TarantoolDatabaseError as error:
            assert error.code == ER_TUPLE_FOUND
        got = await conn.select("kv", [LO + 1], index="primary", iterator="GE", limit=2)
        assert rows(got) == [[i, i, "v%d" % i] for i in (LO + 1, LO + 2)]
        # Over IPROTO, update fields count from 0 (over CALL, from 1: Lua's).
        updated = await conn.update("kv", [LO], [["=", 2, "z"]])
        assert rows(updated) == [[LO, LO, "z"]]
        assert rows(await conn.delete("kv", [LO])) == [[LO, LO, "z"]]
        return True

    assert run(addr, body)


def test_box_space_calls(addr, key_range):
    key_range("kv", LO, HI)
    key_range("customers", 30300, 30310)

    async def body(conn):
        await conn.call("box.space.kv:insert", [[LO, 1, "a"]])
        await conn.call("box.space.kv:replace", [[LO + 1, 2, "b"]])
        opts = {"iterator": "GE", "limit": 2}
        selected = await conn.call("box.space.kv:select", [[LO], opts])
        assert [rows(value) for value in selected.body] == [[[LO, 1, "a"], [LO + 1, 2, "b"]]]
        got = await conn.call("box.space.kv:get", [LO + 1])
        assert rows(got.body) == [[LO + 1, 2, "b"]]
        assert (await conn.call("box.space.kv:count", [[LO], "GE"])).body[0] >= 2
        for i in range(3):
            await conn.insert("customers", [30300 + i, i, A, 1, 1, i, "n"])
        by_a = "box.space.customers.index.composite"
        greatest = await conn.call(by_a + ":max", [[A]])
        assert rows(greatest.body) == [[30302, 2, A, 1, 1, 2, "n"]]
        assert (await conn.call(by_a + ":count", [[A]])).body == [3]
        try:
            await conn.call("box.space.kv:get", [[]])
            raise AssertionError("a partial get was answered")
        except TarantoolDatabaseError as error:
            assert error.code == ER_EXACT_MATCH
        return True

    assert run(addr, body)


def test_a_connection_opened_before_create_index_reads_by_the_new_name(addr):
    ddl_format = [{"name": "id", "type": "unsigned"}, {"name": "v", "type": "string"}]

    async def ddl(*calls):
        admin = asynctnt.Connection(host=addr[0], port=addr[1], username="bench",
                                    password="secret")
        await admin.connect()
        try:
            for name, args in calls:
                try:
                    await admin.call(name, args)
                except TarantoolDatabaseError as error:
                    # Tarantool makes the space, then cannot encode the object it returns;
                    # a drop of a space that is not there is not defined.
                    assert error.code in (ER_PROC_LUA, ER_NO_SUCH_PROC), error
        finally:
            await admin.disconnect()

    async def body(conn):
        await ddl(("box.space.ddl_f:drop", []),
                  ("box.schema.space.create", ["ddl_f", {"format": ddl_format, "id": 605}]),
                  ("box.space.ddl_f:create_index", ["pk"]))
        await conn.refetch_schema()
        for i in range(4):
            await conn.insert("ddl_f", [i, "v%d" % (i % 2)])
        await ddl(("box.space.ddl_f:create_index", ["by_v", {"parts": ["v"], "unique": False}]))
        # asynctnt resolves index names from its schema; a reply after the change carries
        # the new schema version, on which it fetches the schema again, in the background.
        await conn.ping()
        for _ in range(100):
            try:
                got = await conn.select("ddl_f", ["v1"], index="by_v")
                break
            except TarantoolSchemaError:
                await asyncio.sleep(0.02)
        await ddl(("box.space.ddl_f:drop", []))
        return rows(got)

    assert run(addr, body) == [[1, "v1"], [3, "v1"]]
