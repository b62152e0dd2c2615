"""asynctnt, the asyncio connector, against the server under test: it loads the schema on
connect (from ``_vspace`` and ``_vindex``), reads and writes by space and index names, and
calls ``box.space`` methods; errors arrive with Tarantool's codes. Passes against tarn and
against Tarantool 2.6 alike.
"""

import asyncio

import asynctnt
from asynctnt.exceptions import TarantoolDatabaseError

LO, HI = 30201, 30206  # kv ids of this module
A = 700500  # customers' field `a`, used only here
ER_TUPLE_FOUND = 3
ER_EXACT_MATCH = 19


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
