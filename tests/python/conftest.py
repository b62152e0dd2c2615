"""Shared fixtures for the Python-connector tests of tarn.

The server under test is given by the environment variable ``TARN_ADDR``
(``host:port``).  The Rust integration test starts the ``tarn`` binary on an
ephemeral port and runs pytest with that variable set; the same suite can be
pointed at a reference Tarantool started by ``scripts/tarantool/start.sh``.

The server is expected to have:

* space ``kv`` (id 512): id unsigned, bucket_id unsigned, value string;
  primary TREE on id;
* space ``customers`` (id 513): id, bucket_id, a, b, c, d unsigned,
  name string; primary TREE on id; non-unique TREE ``composite`` on
  (a, b, c, d, name); non-unique TREE ``bucket_id`` on bucket_id;
* user ``bench`` with password ``secret``; guest and bench may read, write
  and execute.

Every test owns a disjoint range of primary keys and deletes them before and
after it runs, so the tests are independent of order and of earlier runs.
"""

import os
import time

import pytest
import tarantool
from tarantool.const import ITERATOR_GE

# Iterators are passed as the numeric IPROTO codes: the connector (1.3.0) puts
# a string such as "GE" on the wire unchanged, which Tarantool rejects with
# error 20 "Invalid MsgPack - packet body".

BENCH_USER = "bench"
BENCH_PASSWORD = "secret"


def _parse_addr(value):
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"TARN_ADDR must be host:port, got {value!r}")
    return host.strip("[]"), int(port)


@pytest.fixture(scope="session")
def addr():
    """(host, port) of the server under test, from TARN_ADDR."""
    value = os.environ.get("TARN_ADDR")
    if not value:
        pytest.fail("TARN_ADDR is not set: expected host:port of a running tarn "
                    "(or reference Tarantool) server", pytrace=False)
    return _parse_addr(value)


def connect(addr, **kwargs):
    """Open a connection, retrying for a few seconds while the server starts."""
    host, port = addr
    deadline = time.monotonic() + float(os.environ.get("TARN_CONNECT_TIMEOUT", "10"))
    while True:
        try:
            return tarantool.Connection(host, port, **kwargs)
        except tarantool.error.NetworkError as exc:
            # Retry only while nothing listens yet; an answer from the server
            # (e.g. an AUTH failure, wrapped by the connector) is final.
            cause = exc.__cause__
            if (isinstance(cause, tarantool.error.DatabaseError)
                    and not isinstance(cause, tarantool.error.NetworkError)):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def box_info(addr):
    """``box.info`` of the instance at ``addr``, on a connection of its own."""
    c = connect(addr)
    try:
        return c.call("box.info").data[0]
    finally:
        c.close()


def wait_for(condition, what, timeout=15.0):
    """Polls ``condition`` (a database error counts as not yet) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except tarantool.error.Error:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="session")
def conn(addr):
    """A guest connection shared by the whole session."""
    c = connect(addr)
    yield c
    c.close()


@pytest.fixture(scope="session")
def bench_conn(addr):
    """A connection authenticated as the configured user bench/secret."""
    c = connect(addr, user=BENCH_USER, password=BENCH_PASSWORD)
    yield c
    c.close()


def _purge(conn, space, lo, hi):
    """Delete every tuple of `space` whose primary key is in [lo, hi)."""
    sp = conn.space(space)
    for t in sp.select(lo, iterator=ITERATOR_GE, limit=hi - lo).data:
        if t[0] >= hi:
            break
        sp.delete(t[0])


@pytest.fixture
def key_range(conn):
    """Factory: reserve [lo, hi) in a space; purged before and after the test."""
    reserved = []

    def reserve(space, lo, hi):
        _purge(conn, space, lo, hi)
        reserved.append((space, lo, hi))
        return range(lo, hi)

    yield reserve
    for space, lo, hi in reserved:
        _purge(conn, space, lo, hi)
