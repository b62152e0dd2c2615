"""Loads kv tuples `[id, bucket_id, VALUE_BYTES-byte string]` into space 512 over one IPROTO
connection, REPLACEs in pipelined batches; for scripts/rss-per-tuple.sh.

Usage: python3 scripts/load_kv.py HOST PORT COUNT [VALUE_BYTES [BATCH [ORDER]]]
  ORDER: ascending (default) or random (a fixed-seed shuffle of the ids).
Ids are 1..COUNT, bucket_id is id % 3000 + 1 (vshard's default bucket count), and the value
is VALUE_BYTES of text ending in the id's digits. Every reply is read and an error reply
fails the run. Speaks to tarn and Tarantool alike (standard library only).
"""

import random
import socket
import struct
import sys

from iproto import GREETING_SIZE, ERROR_FLAG, pack, unpack

REQUEST_REPLACE = 3
SPACE_KV = 512
BUCKET_COUNT = 3000


def tuple_body(key, value_bytes):
    digits = str(key)
    value = "v" * (value_bytes - len(digits)) + digits
    return pack({0x10: SPACE_KV, 0x21: [key, key % BUCKET_COUNT + 1, value]})


def packet(sync, key, value_bytes):
    payload = pack({0x00: REQUEST_REPLACE, 0x01: sync}) + tuple_body(key, value_bytes)
    return b"\xce" + struct.pack(">I", len(payload)) + payload


class Replies:
    """Reads reply frames from a socket and checks each one's header."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def take(self, count):
        while count > 0:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
            at = 0
            while count > 0 and len(self.buf) - at >= 5:
                size, start = unpack(self.buf, at)
                if len(self.buf) - start < size:
                    break
                header, _ = unpack(self.buf, start)
                if header.get(0x00, 0) & ERROR_FLAG:
                    body = unpack(self.buf, _)[0] if _ < start + size else {}
                    raise RuntimeError(f"error reply: {body}")
                at = start + size
                count -= 1
            del self.buf[:at]


def main():
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    value_bytes = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    order = sys.argv[6] if len(sys.argv) > 6 else "ascending"
    keys = list(range(1, count + 1))
    if order == "random":
        random.Random(42).shuffle(keys)
    elif order != "ascending":
        raise SystemExit(f"ORDER must be ascending or random, not {order}")
    sock = socket.create_connection((host, port), timeout=120)
    greeting = b""
    while len(greeting) < GREETING_SIZE:
        greeting += sock.recv(GREETING_SIZE - len(greeting))
    assert greeting.startswith(b"Tarantool"), "no IPROTO greeting"
    replies = Replies(sock)
    for start in range(0, count, batch):
        chunk = keys[start:start + batch]
        sock.sendall(b"".join(packet(start + i + 1, key, value_bytes) for i, key in enumerate(chunk)))
        replies.take(len(chunk))
    sock.close()


if __name__ == "__main__":
    main()
