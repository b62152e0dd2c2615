"""tarantool.ConnectionPool over a master and its replica.

Runs only when ``TARN_REPLICA_ADDR`` (``host:port`` of a read-only replica of the server at
``TARN_ADDR``) is set: ``tests/replication.rs`` starts both and runs this file. Against
Tarantool 2.6, point the two variables at a master and a replica with ``read_only = true``.

The pool calls ``box.info`` on every instance about once a second and routes by ``ro`` and
``status``: writes (mode RW) must reach the master, PREFER_RO reads the replica, and the
master's writes reach the replica.
"""

import os

import pytest
import tarantool
from tarantool.connection_pool import Mode

from conftest import _parse_addr, box_info as info, connect, wait_for

KEYS = range(990_000, 990_050)

pytestmark = pytest.mark.skipif(
    not os.environ.get("TARN_REPLICA_ADDR"),
    reason="TARN_REPLICA_ADDR is not set (tests/replication.rs sets it)")


@pytest.fixture(scope="module")
def instances():
    master = _parse_addr(os.environ["TARN_ADDR"])
    replica = _parse_addr(os.environ["TARN_REPLICA_ADDR"])
    return master, replica


def downstreams_of(addr):
    return [entry["downstream"] for entry in info(addr)["replication"].values()
            if "downstream" in entry]


def test_the_pool_writes_to_the_master_and_reads_the_replica(instances):
    master, replica = instances
    master_info, replica_info = info(master), info(replica)
    assert (master_info["ro"], master_info["status"]) == (False, "running")
    assert (replica_info["ro"], replica_info["status"]) == (True, "running")

    pool = tarantool.ConnectionPool(
        addrs=[{"host": master[0], "port": master[1]},
               {"host": replica[0], "port": replica[1]}],
        user="bench", password="secret")
    try:
        # The pool routes by the box.info it polled.
        assert pool.call("box.info", mode=Mode.RW).data[0]["uuid"] == master_info["uuid"]
        assert pool.call("box.info", mode=Mode.PREFER_RO).data[0]["uuid"] == replica_info["uuid"]
        assert pool.call("box.info", mode=Mode.RO).data[0]["uuid"] == replica_info["uuid"]

        for key in KEYS:
            pool.replace("kv", (key, key % 3000, f"pooled {key}"), mode=Mode.RW)
        direct_master = connect(master)
        direct_replica = connect(replica)
        try:
            assert len(direct_master.select("kv", KEYS[-1])) == 1
            wait_for(lambda: len(direct_replica.select("kv", KEYS[-1])) == 1,
                     "the replica to apply the pool's writes")
            # box.info as tools read it: the caught-up replica's vclock is its master's, its
            # upstream follows, and the master sees it downstream.
            wait_for(lambda: info(replica)["vclock"] == info(master)["vclock"],
                     "the replica's vclock to reach the master's")
            upstreams = [entry["upstream"] for entry in info(replica)["replication"].values()
                         if "upstream" in entry]
            assert [u["status"] for u in upstreams] == ["follow"]
            # Tarantool sends a whole-number lag as an integer.
            assert isinstance(upstreams[0]["idle"], float)
            assert isinstance(upstreams[0]["lag"], (int, float))
            assert [d["status"] for d in downstreams_of(master)] == ["follow"]
            wait_for(lambda: [d["vclock"] for d in downstreams_of(master)] == [
                info(master)["vclock"]], "the replica to acknowledge what it applied")
            rows = pool.select("kv", KEYS[0], mode=Mode.PREFER_RO)
            assert list(rows.data) == [[KEYS[0], KEYS[0] % 3000, f"pooled {KEYS[0]}"]]

            # The replica refuses a client's write with Tarantool's error.
            with pytest.raises(tarantool.error.DatabaseError) as refused:
                direct_replica.replace("kv", (KEYS[0], 0, "on the replica"))
            assert refused.value.args[0] == 7

            for key in KEYS:
                pool.delete("kv", key, mode=Mode.RW)
            wait_for(lambda: len(direct_replica.select("kv", KEYS[0])) == 0,
                     "the replica to apply the deletes")
        finally:
            direct_master.close()
            direct_replica.close()
    finally:
        pool.close()
