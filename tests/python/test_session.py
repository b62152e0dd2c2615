"""Authentication, CALL of built-in functions, and error codes of CALL."""

import pytest
from tarantool.error import DatabaseError, NetworkError

from conftest import BENCH_PASSWORD, BENCH_USER, connect

ER_NO_SUCH_PROC = 33
ER_NO_SUCH_USER = 45  # 2.6 .. 2.10.3; 47 since 2.10.4
ER_PASSWORD_MISMATCH = 47  # ER_CREDS_MISMATCH since 2.10.4, same code


def test_auth_as_configured_user(bench_conn, key_range):
    key_range("kv", 1600, 1650)
    kv = bench_conn.space("kv")
    assert bench_conn.ping(notime=True) == "Success"
    assert kv.insert((1600, 1, "bench")).data == [[1600, 1, "bench"]]
    assert kv.select(1600).data == [[1600, 1, "bench"]]
    assert kv.delete(1600).data == [[1600, 1, "bench"]]


def test_reauth_on_open_connection(addr):
    c = connect(addr)
    try:
        c.authenticate(BENCH_USER, BENCH_PASSWORD)
        assert c.ping(notime=True) == "Success"
        # Re-authenticating as guest (empty password) is allowed.
        c.authenticate("guest", "")
        assert c.ping(notime=True) == "Success"
    finally:
        c.close()


def test_wrong_password_raises_47(addr):
    c = connect(addr)
    try:
        with pytest.raises(DatabaseError) as exc:
            c.authenticate(BENCH_USER, "not-the-password")
        assert exc.value.code == ER_PASSWORD_MISMATCH
        # A failed AUTH keeps the connection open and usable.
        assert c.ping(notime=True) == "Success"
        c.authenticate(BENCH_USER, BENCH_PASSWORD)
        assert c.ping(notime=True) == "Success"
    finally:
        c.close()


def test_wrong_password_at_connect_fails(addr):
    with pytest.raises(NetworkError) as exc:
        connect(addr, user=BENCH_USER, password="not-the-password")
    assert isinstance(exc.value.__cause__, DatabaseError)
    assert exc.value.__cause__.code == ER_PASSWORD_MISMATCH


def test_unknown_user(addr):
    c = connect(addr)
    try:
        with pytest.raises(DatabaseError) as exc:
            c.authenticate("no_such_user_xyz", "x")
        # 45 in Tarantool 2.6 .. 2.10.3, 47 from 2.10.4 on (tarn follows 2.11).
        assert exc.value.code in (ER_NO_SUCH_USER, ER_PASSWORD_MISMATCH)
    finally:
        c.close()


def test_call_box_info(conn):
    resp = conn.call("box.info")
    assert len(resp.data) == 1
    info = resp.data[0]
    assert isinstance(info, dict)
    assert info["ro"] is False
    assert info["status"] == "running"
    assert isinstance(info["version"], str) and info["version"]
    assert isinstance(info["id"], int)
    assert isinstance(info["uuid"], str) and len(info["uuid"]) == 36
    assert isinstance(info["pid"], int)


def test_call_box_info_as_user(bench_conn):
    info = bench_conn.call("box.info").data[0]
    assert info["ro"] is False
    assert info["status"] == "running"


def test_call_unknown_function_raises_33(conn):
    with pytest.raises(DatabaseError) as exc:
        conn.call("no_such_function_xyz")
    assert exc.value.code == ER_NO_SUCH_PROC
    assert exc.value.message == "Procedure 'no_such_function_xyz' is not defined"
    # The connection stays usable.
    assert conn.ping(notime=True) == "Success"


def test_call_unknown_dotted_function_raises_33(conn):
    with pytest.raises(DatabaseError) as exc:
        conn.call("no_such_module.fn", 1, 2)
    assert exc.value.code == ER_NO_SUCH_PROC
    assert exc.value.message == "Procedure 'no_such_module.fn' is not defined"
