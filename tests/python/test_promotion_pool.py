"""tarantool.ConnectionPool across a promotion.

Runs only when ``TARN_PROMOTE_ADDR`` (``host:port`` of a read-only replica of the master at
``TARN_ADDR``) is set: ``tests/promotion.rs`` starts both and runs this file. The replica is
promoted with ``box.ctl.promote()``; the former master hears the new term and turns
read-only; the pool, which polls ``box.info`` about once a second, then sends its writes
(mode RW) to the new master and PREFER_RO reads to the former one.
"""

import os

import pytest
import tarantool
from tarantool.connection_pool import Mode

from conftest import _parse_addr, box_info as info, connect, wait_for

BEFORE, AFTER = 991_000, 991_001

pytestmark = pytest.mark.skipif(
    not os.environ.get("TARN_PROMOTE_ADDR"),
    reason="TARN_PROMOTE_ADDR is not set (tests/promotion.rs sets it)")


def test_after_a_promotion_the_pool_writes_to_the_new_master():
    master = _parse_addr(os.environ["TARN_ADDR"])
    replica = _parse_addr(os.environ["TARN_PROMOTE_ADDR"])
    master_uuid, replica_uuid = info(master)["uuid"], info(replica)["uuid"]
    pool = tarantool.ConnectionPool(
        addrs=[{"host": master[0], "port": master[1]},
               {"host": replica[0], "port": replica[1]}],
        user="bench", password="secret")
    direct_master, direct_replica = connect(master), connect(replica)
    try:
        assert pool.call("box.info", mode=Mode.RW).data[0]["uuid"] == master_uuid
        pool.replace("kv", (BEFORE, 1, "before the promotion"), mode=Mode.RW)
        wait_for(lambda: len(direct_replica.select("kv", BEFORE)) == 1,
                 "the replica to apply the write")

        wait_for(lambda: info(replica)["status"] == "running", "the replica's copy to end")
        assert info(master)["election"] == {
            "state": "leader", "vote": 0, "leader": 1, "term": 1}
        assert info(replica)["election"]["state"] == "follower"
        assert direct_replica.call("box.ctl.promote").data == []
        assert info(replica)["ro"] is False
        assert info(replica)["election"] == {
            "state": "leader", "vote": 0, "leader": 1, "term": 2}
        wait_for(lambda: info(master)["ro"] is True, "the former master to be fenced")
        assert info(master)["election"] == {
            "state": "follower", "vote": 0, "leader": 0, "term": 2}
        with pytest.raises(tarantool.error.DatabaseError) as refused:
            direct_master.replace("kv", (AFTER, 1, "on the former master"))
        assert refused.value.args[0] == 7

        wait_for(lambda: pool.call("box.info", mode=Mode.RW).data[0]["uuid"] == replica_uuid,
                 "the pool to route writes to the new master")
        pool.replace("kv", (AFTER, 1, "after the promotion"), mode=Mode.RW)
        assert list(direct_replica.select("kv", AFTER).data) == [
            [AFTER, 1, "after the promotion"]]
        assert pool.call("box.info", mode=Mode.PREFER_RO).data[0]["uuid"] == master_uuid
        assert list(pool.select("kv", BEFORE, mode=Mode.PREFER_RO).data) == [
            [BEFORE, 1, "before the promotion"]]
    finally:
        direct_master.close()
        direct_replica.close()
        pool.close()
