#!/usr/bin/env python3
"""Capture byte-exact IPROTO observations from a running reference Tarantool.

Usage:  .venv/bin/python scripts/tarantool/capture_reference.py HOST:PORT WORK_DIR
The instance must be the one from instance.lua (spaces kv/customers, guest
with read,write,execute on universe); WORK_DIR/admin.sock is its admin
console, used for the DDL of a scratch space.  Uses raw sockets (so the exact bytes
are visible) plus a logging TCP proxy in front of the Python connector to
show what the connector sends on connect.  Writes a plain-text report to
stdout.  Creates a scratch space `scratch_hash` via the admin console and drops it again;
uses kv keys 90000..90099 and deletes them.
"""

import base64
import hashlib
import os
import socket
import sys
import threading

import msgpack

REQ = {"SELECT": 1, "INSERT": 2, "REPLACE": 3, "UPDATE": 4, "DELETE": 5,
       "AUTH": 7, "EVAL": 8, "UPSERT": 9, "CALL": 10, "PING": 64, "ID": 73}
K_SPACE, K_INDEX, K_LIMIT, K_OFFSET, K_ITER = 0x10, 0x11, 0x12, 0x13, 0x14
K_KEY, K_TUPLE, K_FUNC, K_USER, K_EXPR, K_OPS = 0x20, 0x21, 0x22, 0x23, 0x27, 0x28


def hx(b):
    return " ".join(f"{x:02x}" for x in b)


class Raw:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        self.greeting = self._recv(128)
        self.salt = base64.b64decode(self.greeting[64:108])
        self.sync = 0

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def request(self, rtype, body=None):
        self.sync += 1
        payload = msgpack.packb({0: rtype, 1: self.sync})
        if body is not None:
            payload += msgpack.packb(body)
        pkt = msgpack.packb(len(payload)) + payload
        self.s.sendall(pkt)
        size_raw = self._recv(5)
        size = msgpack.unpackb(size_raw)
        data = self._recv(size)
        unp = msgpack.Unpacker(raw=False, strict_map_key=False)
        unp.feed(data)
        objs = list(unp)
        header = objs[0]
        body = objs[1] if len(objs) > 1 else None
        return pkt, size_raw + data, header, body

    def auth(self, user, password):
        h1 = hashlib.sha1(password.encode()).digest()
        h2 = hashlib.sha1(h1).digest()
        h3 = hashlib.sha1(self.salt[:20] + h2).digest()
        scramble = bytes(a ^ b for a, b in zip(h1, h3))
        return self.request(REQ["AUTH"], {K_USER: user, K_TUPLE: ["chap-sha1", scramble]})


def show(title, raw, rtype, body, *, show_bytes=False):
    pkt, resp, header, rbody = raw.request(rtype, body)
    code = header[0]
    print(f"### {title}")
    print(f"request body: {body!r}")
    if show_bytes:
        print(f"request bytes:  {hx(pkt)}")
        print(f"response bytes: {hx(resp)}")
    if code & 0x8000:
        print(f"-> ERROR {code & 0x7fff}: {rbody.get(0x31)!r}")
        stack = rbody.get(0x52, {}).get(0, [])
        for e in stack:
            print(f"   stack: type={e.get(0)!r} code={e.get(5)} errno={e.get(4)} "
                  f"fields={e.get(6)!r} msg={e.get(3)!r}")
    else:
        print(f"-> OK header={header!r} body={rbody!r}")
    print()
    return header, rbody


def admin(sock_path, lua):
    """Run one line of Lua on the admin console; return its YAML reply text."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    buf = b""
    while b"\n" not in buf:  # greeting line(s)
        buf += s.recv(4096)
    s.sendall(lua.encode() + b"\n")
    out = b""
    while not out.endswith(b"\n...\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    text = out.decode()
    if "error:" in text:
        raise RuntimeError(text)
    return text


def raw_request(raw, rtype, body_bytes):
    """Send a request whose body is given as raw bytes; return the raw response after the size."""
    raw.sync += 1
    hdr = msgpack.packb({0: rtype, 1: raw.sync})
    raw.s.sendall(msgpack.packb(len(hdr) + len(body_bytes)) + hdr + body_bytes)
    size = msgpack.unpackb(raw._recv(5))
    return raw._recv(size)


def eval_(raw, expr, *args):
    _, _, header, body = raw.request(REQ["EVAL"], {K_EXPR: expr, K_TUPLE: list(args)})
    if header[0] & 0x8000:
        raise RuntimeError(body.get(0x31))
    return body.get(0x30)


def proxy_log(host, port):
    """Start a one-shot logging proxy; return (listen_port, log list, thread)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    log = []

    def pump(src, dst, tag):
        try:
            while True:
                d = src.recv(65536)
                if not d:
                    break
                log.append((tag, d))
                dst.sendall(d)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def run():
        c, _ = lsock.accept()
        u = socket.create_connection((host, port))
        t1 = threading.Thread(target=pump, args=(c, u, "C>S"), daemon=True)
        t2 = threading.Thread(target=pump, args=(u, c, "S>C"), daemon=True)
        t1.start()
        t2.start()
        t1.join()
        t2.join()
        lsock.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return lsock.getsockname()[1], log, t


def decode_stream(data):
    """Split a client->server byte stream into (size_bytes, header, body)."""
    unp = msgpack.Unpacker(raw=False, strict_map_key=False)
    unp.feed(data)
    out = []
    try:
        while True:
            size = unp.unpack()
            start = unp.tell()
            header = unp.unpack()
            body = None
            if unp.tell() - start < size:
                body = unp.unpack()
            out.append((size, header, body))
    except msgpack.OutOfData:
        pass
    return out


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    port = int(port)
    r = Raw(host, port)
    print("## greeting")
    print(repr(r.greeting[:64]))
    print(repr(r.greeting[64:]))
    print()

    KV, CU = 512, 513
    for k in range(90000, 90100):
        r.request(REQ["DELETE"], {K_SPACE: KV, K_KEY: [k]})
    asock = os.path.join(sys.argv[2], "admin.sock")
    admin(asock, "if box.space.scratch_hash then box.space.scratch_hash:drop() end")
    admin(asock, "s = box.schema.space.create('scratch_hash', {id = 600, format = "
                 "{{'a','unsigned'},{'b','unsigned'}}}) "
                 "s:create_index('pk', {type = 'HASH', parts = {'a', 'b'}}) s = nil")

    print("## (a) errors")
    show("insert ok", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90000, 1, "v"]}, show_bytes=True)
    show("3 duplicate insert", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90000, 2, "w"]}, show_bytes=True)
    show("3 duplicate via REPLACE? (replace overwrites - expect OK)", r, REQ["REPLACE"],
         {K_SPACE: KV, K_TUPLE: [90000, 1, "v"]})
    show("23 insert string into unsigned field 2", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90001, "x", "v"]})
    show("23 insert number into string field 3", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90001, 1, 5]})
    show("23 insert negative into unsigned pk", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [-1, 1, "v"]})
    show("23 insert nil into field 3", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90001, 1, None]})
    show("39 insert missing field 3", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90001, 1]})
    show("39 insert empty tuple", r, REQ["INSERT"], {K_SPACE: KV, K_TUPLE: []})
    show("39 customers missing fields 3..7", r, REQ["INSERT"], {K_SPACE: CU, K_TUPLE: [90001, 1]})
    show("18 select kv string key", r, REQ["SELECT"],
         {K_SPACE: KV, K_INDEX: 0, K_LIMIT: 10, K_KEY: ["abc"]})
    show("18 select customers composite part 4 (0-based) wrong type", r, REQ["SELECT"],
         {K_SPACE: CU, K_INDEX: 1, K_LIMIT: 10, K_KEY: [1, 1, 1, 1, 7]})
    show("18 delete kv string key", r, REQ["DELETE"], {K_SPACE: KV, K_KEY: ["abc"]})
    show("31 select kv two parts", r, REQ["SELECT"],
         {K_SPACE: KV, K_INDEX: 0, K_LIMIT: 10, K_KEY: [1, 2]})
    show("31 select composite six parts", r, REQ["SELECT"],
         {K_SPACE: CU, K_INDEX: 1, K_LIMIT: 10, K_KEY: [1, 1, 1, 1, "x", 1]})
    show("19 delete kv empty key", r, REQ["DELETE"], {K_SPACE: KV, K_KEY: []})
    show("19 delete kv two parts", r, REQ["DELETE"], {K_SPACE: KV, K_KEY: [1, 2]})
    show("19 update kv empty key", r, REQ["UPDATE"], {K_SPACE: KV, K_KEY: [], K_TUPLE: [["=", 2, "x"]]})
    show("41 delete via non-unique composite", r, REQ["DELETE"],
         {K_SPACE: CU, K_INDEX: 1, K_KEY: [1, 1, 1, 1, "x"]})
    show("41 update via non-unique bucket_id", r, REQ["UPDATE"],
         {K_SPACE: CU, K_INDEX: 2, K_KEY: [1], K_TUPLE: [["=", 6, "x"]]})
    show("136 HASH partial key (EQ, 1 of 2 parts)", r, REQ["SELECT"],
         {K_SPACE: 600, K_INDEX: 0, K_LIMIT: 10, K_KEY: [1]})
    show("136 HASH empty key with EQ", r, REQ["SELECT"],
         {K_SPACE: 600, K_INDEX: 0, K_LIMIT: 10, K_ITER: 0, K_KEY: []})
    show("HASH empty key with ALL (ok)", r, REQ["SELECT"],
         {K_SPACE: 600, K_INDEX: 0, K_LIMIT: 10, K_ITER: 2, K_KEY: []})
    show("112 HASH with GE", r, REQ["SELECT"],
         {K_SPACE: 600, K_INDEX: 0, K_LIMIT: 10, K_ITER: 5, K_KEY: [1, 1]})
    show("112 TREE with BITS_ALL_SET (7)", r, REQ["SELECT"],
         {K_SPACE: KV, K_INDEX: 0, K_LIMIT: 10, K_ITER: 7, K_KEY: [1]})
    show("112 TREE composite with OVERLAPS (10)", r, REQ["SELECT"],
         {K_SPACE: CU, K_INDEX: 1, K_LIMIT: 10, K_ITER: 10, K_KEY: [1]})
    show("1 iterator 12", r, REQ["SELECT"],
         {K_SPACE: KV, K_INDEX: 0, K_LIMIT: 10, K_ITER: 12, K_KEY: [1]})
    show("20 iterator as string 'GE' (what the Python connector sends for iterator='GE')", r,
         REQ["SELECT"], {K_SPACE: KV, K_INDEX: 0, K_LIMIT: 10, K_ITER: "GE", K_KEY: [1]})
    show("36 no such space id", r, REQ["SELECT"], {K_SPACE: 9999, K_LIMIT: 1, K_KEY: []})
    show("35 no such index id", r, REQ["SELECT"], {K_SPACE: KV, K_INDEX: 7, K_LIMIT: 1, K_KEY: []})
    show("69 select without limit", r, REQ["SELECT"], {K_SPACE: KV, K_KEY: []})

    print("## (a) update errors (kv tuple [90010, 5, 'hello', 3.5])")
    r.request(REQ["INSERT"], {K_SPACE: KV, K_TUPLE: [90010, 5, "hello", 3.5]})
    u = lambda ops, key=90010: {K_SPACE: KV, K_INDEX: 0, K_KEY: [key], K_TUPLE: ops}  # noqa: E731
    show("26 '+' string arg on unsigned field (0-based 1)", r, REQ["UPDATE"], u([["+", 1, "x"]]))
    show("26 '+' on string field (0-based 2)", r, REQ["UPDATE"], u([["+", 2, 1]]))
    show("26 '+' by name on string field", r, REQ["UPDATE"], u([["+", "value", 1]]))
    show("26 '&' with negative arg", r, REQ["UPDATE"], u([["&", 1, -1]]))
    show("26 '&' on string field", r, REQ["UPDATE"], u([["&", 2, 1]]))
    show("26 ':' splice on unsigned field", r, REQ["UPDATE"], u([[":", 1, 0, 1, "x"]]))
    show("28 unknown op '%'", r, REQ["UPDATE"], u([["=", 2, "a"], ["%", 1, 1]]))
    show("28 wrong arg count", r, REQ["UPDATE"], u([["=", 2]]))
    show("28 splice wrong arg count", r, REQ["UPDATE"], u([[":", 2, 1, "x"]]))
    show("1 op not array", r, REQ["UPDATE"], u(["=", 2, "a"]))
    show("1 empty op", r, REQ["UPDATE"], u([[]]))
    show("1 op name not string", r, REQ["UPDATE"], u([[1, 2, "a"]]))
    show("37 field 10 (0-based) not found", r, REQ["UPDATE"], u([["=", 10, "a"]]))
    show("37 field -6 not found", r, REQ["UPDATE"], u([["=", -6, "a"]]))
    show("37 '!' beyond count", r, REQ["UPDATE"], u([["!", 6, "a"]]))
    show("37 '#' at count", r, REQ["UPDATE"], u([["#", 4, 1]]))
    show("201 unknown field name", r, REQ["UPDATE"], u([["=", "nosuch", 1]]))
    show("29 '#' count 0", r, REQ["UPDATE"], u([["#", 2, 0]]))
    show("95 overflow '+' on unsigned", r, REQ["UPDATE"], u([["+", 1, 2**64 - 1]]))
    show("95 overflow '-' below int64", r, REQ["UPDATE"], u([["-", 1, 2**64 - 1]]))
    r.request(REQ["UPDATE"], u([["=", 3, -2**63]]))
    show("95 overflow '+' -1 on field holding int64 min", r, REQ["UPDATE"], u([["+", 3, -1]]))
    r.request(REQ["UPDATE"], u([["=", 3, 3.5]]))
    show("29 two arithmetic ops on the same field", r, REQ["UPDATE"], u([["+", 1, 1], ["+", 1, 1]]))
    show("two '=' on the same field", r, REQ["UPDATE"], u([["=", 2, "a"], ["=", 2, "b"]]))
    show("'=' then '+' on the same field", r, REQ["UPDATE"], u([["=", 1, 7], ["+", 1, 1]]))
    show("'+' then '=' on the same field", r, REQ["UPDATE"], u([["+", 1, 1], ["=", 1, 5]]))
    show("25 splice offset out of bound", r, REQ["UPDATE"], u([[":", 2, -10, 1, "x"]]))
    show("94 modify pk", r, REQ["UPDATE"], u([["=", 0, 90011]]))
    show("94 modify pk by '+'", r, REQ["UPDATE"], u([["+", 0, 1]]))
    show("23 update result violates format (string into unsigned)", r, REQ["UPDATE"],
         u([["=", 1, "str"]]))
    show("39 update deletes required field", r, REQ["UPDATE"], u([["#", 1, 3]]))
    show("update with INDEX_BASE=1, field 0", r, REQ["UPDATE"],
         {K_SPACE: KV, K_KEY: [90010], K_TUPLE: [["=", 0, 1]], 0x15: 1})

    print("## (d) UPSERT / UPDATE missing / DELETE missing replies")
    show("UPSERT absent key", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["+", 1, 1]]}, show_bytes=True)
    show("UPSERT present key", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["+", 1, 1]]}, show_bytes=True)
    show("select after upserts", r, REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 1, K_KEY: [90020]})
    show("UPSERT present key, failing op '+' on string (skipped, logged)", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["+", 2, 1], ["=", 1, 50]]})
    show("select after", r, REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 1, K_KEY: [90020]})
    show("UPSERT present key, unknown op (decode error, returned)", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["%", 1, 1]]})
    show("UPSERT present key, '+' with string arg (decode error?)", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["+", 1, "x"]]})
    show("UPSERT tuple violating format", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, "x", "new"], K_OPS: []})
    show("UPSERT present key, changes pk (skipped, no error)", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["=", 0, 90021]]})
    show("UPSERT present key, '=' string into unsigned (format error returned)", r, REQ["UPSERT"],
         {K_SPACE: KV, K_TUPLE: [90020, 1, "new"], K_OPS: [["=", 1, "str"]]})
    show("UPDATE missing key", r, REQ["UPDATE"], u([["=", 2, "x"]], key=90099), show_bytes=True)
    show("DELETE missing key", r, REQ["DELETE"], {K_SPACE: KV, K_KEY: [90099]}, show_bytes=True)
    show("DELETE existing key", r, REQ["DELETE"], {K_SPACE: KV, K_KEY: [90020]}, show_bytes=True)
    show("SELECT nothing", r, REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 1, K_KEY: [90099]}, show_bytes=True)
    show("PING", r, REQ["PING"], None, show_bytes=True)
    show("ID on 2.6", r, REQ["ID"], {0x54: 6, 0x55: [2]}, show_bytes=True)

    print("## non-canonical integer encodings in a stored tuple")
    k64 = bytes([0xcf]) + (90040).to_bytes(8, "big")
    ins = bytes([0x82, 0x10, 0xcd, 0x02, 0x00, 0x21, 0x93]) + k64 + bytes([0xcd, 0x00, 0x05, 0xa1, 0x78])
    print("INSERT [90040 as cf uint64, 5 as cd uint16, 'x'] ->", hx(raw_request(r, 2, ins)))
    print("SELECT EQ key 90040 as ce ->", r.request(REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 5, K_KEY: [90040]})[3])
    sel = bytes([0x83, 0x10, 0xcd, 0x02, 0x00, 0x12, 0x05, 0x20, 0x91]) + k64
    print("SELECT EQ key 90040 as cf ->", hx(raw_request(r, 1, sel)))
    print("SELECT GE key 90040 as ce ->", r.request(REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 1, K_ITER: 5, K_KEY: [90040]})[3])
    print("SELECT LE key 90040 as ce ->", r.request(REQ["SELECT"], {K_SPACE: KV, K_LIMIT: 1, K_ITER: 4, K_KEY: [90040]})[3])
    print("DELETE key 90040 as ce ->", r.request(REQ["DELETE"], {K_SPACE: KV, K_KEY: [90040]})[3])
    print("DELETE key 90040 as cf ->", hx(raw_request(r, 5, bytes([0x82, 0x10, 0xcd, 0x02, 0x00, 0x20, 0x91]) + k64)))
    print()

    print("## (e) floats after '+' (field 3 is beyond the format, untyped)")
    for arg in (1.5, 0.1, 2):
        r.request(REQ["REPLACE"], {K_SPACE: KV, K_TUPLE: [90030, 1, "f", 10]})
        show(f"'+' {arg!r} on field holding uint 10", r, REQ["UPDATE"],
             u([["+", 3, arg]], key=90030), show_bytes=True)
    r.request(REQ["REPLACE"], {K_SPACE: KV, K_TUPLE: [90030, 1, "f", 10.25]})
    show("'+' 1 (int) on field holding double 10.25", r, REQ["UPDATE"],
         u([["+", 3, 1]], key=90030), show_bytes=True)
    show("'-' 10.25 on field holding double 11.25 (integral result)", r, REQ["UPDATE"], u([["-", 3, 10.25]], key=90030),
         show_bytes=True)
    show("'+' 1.5 on unsigned field bucket_id", r, REQ["UPDATE"], u([["+", 1, 1.5]], key=90030))
    show("'+' 2.0 on unsigned field bucket_id (integral double)", r, REQ["UPDATE"],
         u([["+", 1, 2.0]], key=90030))

    print("## (b) _vspace / _vindex rows for 512, 513")
    for sid, name in ((281, "_vspace"), (289, "_vindex")):
        for key in (512, 513):
            _, _, h, b = r.request(REQ["SELECT"], {K_SPACE: sid, K_INDEX: 0, K_LIMIT: 100,
                                                  K_ITER: 0, K_KEY: [key]})
            for t in b[0x30]:
                print(f"{name} {t!r}")
    _, _, h, b = r.request(REQ["SELECT"], {K_SPACE: 281, K_INDEX: 0, K_LIMIT: 1000, K_ITER: 2,
                                          K_KEY: []})
    print("guest _vspace ALL ids:", [t[0] for t in b[0x30]], "schema_version:", h.get(5))
    _, _, h, b = r.request(REQ["SELECT"], {K_SPACE: 289, K_INDEX: 0, K_LIMIT: 1000, K_ITER: 2,
                                          K_KEY: []})
    print("guest _vindex ALL rows:", len(b[0x30]))
    admin(asock, "box.space.scratch_hash:create_index('deflt', {parts = {'b'}, unique = false})")
    _, _, h, b = r.request(REQ["SELECT"], {K_SPACE: 289, K_INDEX: 0, K_LIMIT: 100, K_KEY: [600]})
    for t in b[0x30]:
        print(f"_vindex (scratch, 'pk' type='HASH', 'deflt' no type given) {t!r}")
    print()

    print("## (c) box.info over CALL")
    _, _, h, b = r.request(REQ["CALL"], {K_FUNC: "box.info", K_TUPLE: []})
    info = b[0x30]
    print("return values:", len(info))
    for k in sorted(info[0]):
        v = info[0][k]
        print(f"  {k}: {type(v).__name__} = {v!r}"[:200])
    print()
    show("CALL unknown function", r, REQ["CALL"], {K_FUNC: "no_such_fn", K_TUPLE: []})
    show("CALL box.info.ro? (not a function)", r, REQ["CALL"], {K_FUNC: "box.info.ro", K_TUPLE: []})

    print("## AUTH")
    print("bench ok:", r.auth("bench", "secret")[2])
    _, _, h, b = r.auth("bench", "bad")
    print("bench bad:", h[0] & 0x7fff, b.get(0x31))
    _, _, h, b = r.auth("nouser", "x")
    print("unknown user:", h[0] & 0x7fff, b.get(0x31))
    print()

    print("## (b) what the Python connector sends on connect (via logging proxy)")
    import tarantool
    for kwargs in ({}, {"user": "bench", "password": "secret"}):
        pport, log, t = proxy_log(host, port)
        c = tarantool.Connection("127.0.0.1", pport, **kwargs)
        c.space("kv").select(1)
        c.call("box.info")
        c.close()
        t.join(5)
        cs = b"".join(d for tag, d in log if tag == "C>S")
        print(f"connector {tarantool.__version__} kwargs={kwargs}:")
        for size, header, body in decode_stream(cs):
            if body and K_TUPLE in body and header.get(0) == 7:
                body = dict(body)
                body[K_TUPLE] = [body[K_TUPLE][0], f"<{len(body[K_TUPLE][1])}-byte scramble, "
                                 f"{type(body[K_TUPLE][1]).__name__}>"]
            print(f"  size={size} header={header!r} body={body!r}")
        first = cs[:16]
        print(f"  first request bytes: {hx(first)}")
        print()

    admin(asock, "box.space.scratch_hash:drop()")
    for k in range(90000, 90100):
        r.request(REQ["DELETE"], {K_SPACE: KV, K_KEY: [k]})


if __name__ == "__main__":
    main()
