"""A minimal blocking IPROTO client for the benchmark scripts (standard library only).

The scripts run where the `msgpack` package may be missing, so this file carries the small
MessagePack subset IPROTO needs: encoding of ints, strings, lists, maps, nil and booleans,
and decoding of every MessagePack type a reply can hold (ext values come back as
`(type, bytes)`). It speaks to tarn and to Tarantool alike.

    with Client("127.0.0.1", 3301) as c:
        c.call("box.snapshot")
        c.select(513, 0, [42])
"""

import socket
import struct

GREETING_SIZE = 128
REQUEST_SELECT, REQUEST_CALL, REQUEST_EVAL = 1, 10, 8
KEY_CODE, KEY_SYNC = 0x00, 0x01
KEY_SPACE, KEY_INDEX, KEY_LIMIT, KEY_OFFSET, KEY_ITERATOR = 0x10, 0x11, 0x12, 0x13, 0x14
KEY_KEY, KEY_TUPLE, KEY_FUNCTION, KEY_EXPRESSION = 0x20, 0x21, 0x22, 0x27
KEY_DATA, KEY_ERROR = 0x30, 0x31
ERROR_FLAG = 0x8000


class IprotoError(Exception):
    """The server answered with an error reply."""

    def __init__(self, code, message):
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


def pack(value, out=None):
    """MessagePack encoding of `value` (None, bool, int, str, bytes, list/tuple, dict)."""
    out = bytearray() if out is None else out
    if value is None:
        out.append(0xC0)
    elif value is True or value is False:
        out.append(0xC3 if value else 0xC2)
    elif isinstance(value, int):
        _pack_int(value, out)
    elif isinstance(value, str):
        data = value.encode()
        _pack_len(len(data), out, fix=(0xA0, 31), small=0xD9, medium=0xDA, large=0xDB)
        out += data
    elif isinstance(value, bytes):
        _pack_len(len(value), out, fix=None, small=0xC4, medium=0xC5, large=0xC6)
        out += value
    elif isinstance(value, (list, tuple)):
        _pack_len(len(value), out, fix=(0x90, 15), small=None, medium=0xDC, large=0xDD)
        for item in value:
            pack(item, out)
    elif isinstance(value, dict):
        _pack_len(len(value), out, fix=(0x80, 15), small=None, medium=0xDE, large=0xDF)
        for key, item in value.items():
            pack(key, out)
            pack(item, out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")
    return out


def _pack_int(value, out):
    if 0 <= value < 0x80:
        out.append(value)
    elif -32 <= value < 0:
        out += struct.pack(">b", value)
    elif value >= 0:
        for marker, fmt, limit in ((0xCC, ">B", 1 << 8), (0xCD, ">H", 1 << 16),
                                   (0xCE, ">I", 1 << 32), (0xCF, ">Q", 1 << 64)):
            if value < limit:
                out.append(marker)
                out += struct.pack(fmt, value)
                return
        raise OverflowError(value)
    else:
        out.append(0xD3)
        out += struct.pack(">q", value)


def _pack_len(length, out, fix, small, medium, large):
    if fix is not None and length <= fix[1]:
        out.append(fix[0] | length)
    elif small is not None and length < 1 << 8:
        out += bytes((small, length))
    elif length < 1 << 16:
        out.append(medium)
        out += struct.pack(">H", length)
    else:
        out.append(large)
        out += struct.pack(">I", length)


def unpack(data, at=0):
    """Decodes one value of `data` from offset `at`; returns (value, next offset)."""
    marker = data[at]
    at += 1
    if marker <= 0x7F:
        return marker, at
    if marker >= 0xE0:
        return marker - 0x100, at
    if 0x80 <= marker <= 0x8F:
        return _unpack_map(data, at, marker & 0x0F)
    if 0x90 <= marker <= 0x9F:
        return _unpack_array(data, at, marker & 0x0F)
    if 0xA0 <= marker <= 0xBF:
        length = marker & 0x1F
        return data[at:at + length].decode(errors="replace"), at + length
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if marker in fixed:
        return fixed[marker], at
    scalars = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
               0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if marker in scalars:
        fmt = scalars[marker]
        return struct.unpack_from(fmt, data, at)[0], at + struct.calcsize(fmt)
    lengths = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I",
               0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I", 0xC7: ">B", 0xC8: ">H",
               0xC9: ">I"}
    if marker in lengths:
        fmt = lengths[marker]
        length = struct.unpack_from(fmt, data, at)[0]
        at += struct.calcsize(fmt)
        if marker in (0xDC, 0xDD):
            return _unpack_array(data, at, length)
        if marker in (0xDE, 0xDF):
            return _unpack_map(data, at, length)
        if marker in (0xC7, 0xC8, 0xC9):
            return (data[at], bytes(data[at + 1:at + 1 + length])), at + 1 + length
        raw = bytes(data[at:at + length])
        return (raw.decode(errors="replace") if marker >= 0xD9 else raw), at + length
    if 0xD4 <= marker <= 0xD8:
        length = 1 << (marker - 0xD4)
        return (data[at], bytes(data[at + 1:at + 1 + length])), at + 1 + length
    raise ValueError(f"invalid MessagePack marker 0x{marker:02x}")


def _unpack_array(data, at, length):
    items = []
    for _ in range(length):
        item, at = unpack(data, at)
        items.append(item)
    return items, at


def _unpack_map(data, at, length):
    members = {}
    for _ in range(length):
        key, at = unpack(data, at)
        value, at = unpack(data, at)
        members[key] = value
    return members, at


class Client:
    """One connection; one request at a time."""

    def __init__(self, host, port, timeout_seconds=60.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_seconds)
        self.greeting = self._read_exact(GREETING_SIZE)
        if not self.greeting.startswith(b"Tarantool"):
            raise ConnectionError(f"{host}:{port} sent no IPROTO greeting")
        self.sync = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def _read_exact(self, size):
        buf = bytearray()
        while len(buf) < size:
            chunk = self.sock.recv(size - len(buf))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk
        return bytes(buf)

    def request(self, request_type, body):
        """Sends one request; returns the reply body's data, raises IprotoError on an error."""
        self.sync += 1
        payload = pack({KEY_CODE: request_type, KEY_SYNC: self.sync}) + pack(body)
        self.sock.sendall(b"\xce" + struct.pack(">I", len(payload)) + payload)
        prefix = self._read_exact(1)
        if prefix[0] <= 0x7F:
            size = prefix[0]
        else:
            width = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}[prefix[0]]
            size = int.from_bytes(self._read_exact(width), "big")
        packet = self._read_exact(size)
        header, at = unpack(packet)
        reply = unpack(packet, at)[0] if at < len(packet) else {}
        code = header.get(KEY_CODE, 0)
        if code & ERROR_FLAG:
            raise IprotoError(code & ~ERROR_FLAG, reply.get(KEY_ERROR, "(no message)"))
        return reply.get(KEY_DATA)

    def call(self, function_name, args=()):
        return self.request(REQUEST_CALL, {KEY_FUNCTION: function_name, KEY_TUPLE: list(args)})

    def eval(self, expression, args=()):
        return self.request(REQUEST_EVAL, {KEY_EXPRESSION: expression, KEY_TUPLE: list(args)})

    def select(self, space_id, index_id, key, limit=1, iterator=0):
        return self.request(REQUEST_SELECT, {KEY_SPACE: space_id, KEY_INDEX: index_id,
                                             KEY_LIMIT: limit, KEY_OFFSET: 0,
                                             KEY_ITERATOR: iterator, KEY_KEY: list(key)})
