#!/usr/bin/env python3
"""Soak test of tarn: mixed load for a long time, RSS stability, and kill -9 durability.

Run through scripts/soak.sh, which builds tarn and passes the paths. The steps:

1. Start tarn (WAL mode `write`, given explicitly) on an empty data directory.
2. WORKERS processes each own a slice of a fixed key set (kv keys 0..KV_KEYS-1, customers
   keys 0..CUSTOMER_KEYS-1; a key belongs to worker `key % WORKERS`), populate their keys
   and then, over CONNS connections each with up to PIPELINE requests in flight, send a
   weighted mix of: IPROTO get (SELECT EQ on kv), replace (kv, customers), delete, range
   selects (GE with a limit on kv's primary key and on customers' `composite` index),
   crud.get, crud.replace, crud.delete, crud.select with a condition, and
   crud.insert_many with rollback_on_error. Only the owner of a key writes it, and never
   with two writes of one key in flight, so each worker knows every key's last
   acknowledged state and the one write (if any) in flight on it. A get or crud.get of an
   own key with no write sent on it during the read is checked against that state.
3. Every INTERVAL seconds: tarn's RSS (/proc/PID/status VmRSS) and the requests per second
   of each operation type since the last line, so a stall shows as a row of zeros. With
   SNAPSHOT_INTERVAL, box.snapshot is called under the load too (see `Snapshots`).
4. At the end, with the load still running: kill -9 tarn. Each worker reads the replies
   that arrived before the kill, then writes its model (acknowledged state per key, and
   the state a write in flight would leave) to a file. tarn is restarted on the same data
   directory, both spaces are read whole, and every key must hold its last acknowledged
   state, or the state of its write in flight; deleted keys must be absent; no other key
   may exist.

Verdicts (exit status 1 if any FAILs): RSS at the end within RSS_TOLERANCE of RSS after the
first minute (after the first sixth of a run shorter than six minutes); no unexpected error
reply and no wrong read during the load; no interval without replies; every box.snapshot
answered ok; every acknowledged write present after the kill.

A key's state is an int: -1 = absent, n >= 0 = present with the tuple `kv_tuple(key, n)`
(resp. `customer_tuple`), so a model of 120,000 keys is two dicts of ints and a worker
re-derives any expected tuple from (key, n).
"""

import argparse
import marshal
import multiprocessing
import os
import random
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iproto import Client, pack, unpack  # noqa: E402

KV, CUSTOMERS = 512, 513
SPACE_NAMES = {KV: "kv", CUSTOMERS: "customers"}
REQUEST_SELECT, REQUEST_REPLACE, REQUEST_DELETE, REQUEST_CALL = 1, 3, 5, 10
ITERATOR_EQ, ITERATOR_GE, ITERATOR_GT = 0, 5, 6
BUCKET_COUNT = 3000  # conf/tarn.toml's bucket_count
ABSENT = -1
RANGE_LIMIT = 10
INSERT_MANY_TUPLES = 5
# Of the insert_many batches, the share that also carries an existing key, whose duplicate
# makes its shard roll the batch back.
INSERT_MANY_DUPLICATE_SHARE = 0.3
LISTENING = re.compile(r"listening on ([0-9.]+:\d+)")
START_TIMEOUT_SECONDS = 600
DRAIN_TIMEOUT_SECONDS = 30

# Operation types: (name, weight). The weights are relative request counts.
OPERATIONS = [
    ("get", 25),
    ("replace", 20),
    ("delete", 6),
    ("select_kv_ge", 4),
    ("select_composite_ge", 4),
    ("crud.get", 12),
    ("crud.replace", 14),
    ("crud.delete", 6),
    ("crud.select", 4),
    ("crud.insert_many", 2),
]
OP_NAMES = [name for name, _ in OPERATIONS]
(OP_GET, OP_REPLACE, OP_DELETE, OP_SELECT_KV, OP_SELECT_COMPOSITE, OP_CRUD_GET,
 OP_CRUD_REPLACE, OP_CRUD_DELETE, OP_CRUD_SELECT, OP_CRUD_INSERT_MANY) = range(len(OPERATIONS))
WRITES = (OP_REPLACE, OP_DELETE, OP_CRUD_REPLACE, OP_CRUD_DELETE)
# Per-worker counters shared with the parent, after the operation counts.
STAT_ERRORS, STAT_WRONG_READS, STAT_READS_CHECKED, STAT_ACKED_WRITES = range(
    len(OPERATIONS), len(OPERATIONS) + 4)
STATS = len(OPERATIONS) + 4
# A replace or delete goes to kv with this probability, else to customers.
KV_WRITE_SHARE = 0.75


def log(text):
    print(text, file=sys.stderr, flush=True)


# --- keys, buckets and the tuples a state stands for -------------------------------------

def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def bucket_of(key):
    """crud's bucket_id of a one-part unsigned key (iproto.md 18.6: CRC-32C of the decimal
    text, initial 0xFFFFFFFF, no final xor)."""
    crc = 0xFFFFFFFF
    for byte in str(key).encode():
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc % BUCKET_COUNT + 1


assert [bucket_of(k) for k in (10, 14, 50)] == [569, 56, 1965], "crc32c drifted from crud's"

FILLER = "abcdefghijklmnopqrstuvwxyz0123456789" * 8


def _mix(key, state):
    return (key * 2654435761 + state * 40503 + 12345) & 0xFFFFFFFF


def kv_value(key, state):
    """8 to 207 characters, so replaces keep changing the sizes the allocator serves."""
    prefix = f"k{key}s{state}:"
    return prefix + FILLER[:max(0, 8 + _mix(key, state) % 200 - len(prefix))]


def kv_tuple(key, state, bucket):
    return [key, bucket, kv_value(key, state)]


def customer_fields(key, state):
    """a, b, c, d (0..999, so replaces move the key's `composite` index entry) and name."""
    h = _mix(key, state)
    return (h % 1000, (h >> 10) % 1000, (h >> 20) % 1000, (h >> 5) % 1000,
            f"n{key}s{state}:" + FILLER[:h % 24])


def customer_tuple(key, state, bucket):
    return [key, bucket, *customer_fields(key, state)]


def tuple_of(space, key, state, bucket):
    return (kv_tuple if space == KV else customer_tuple)(key, state, bucket)


def initial_present_share():
    """The share of keys present once deletes and the puts that recreate them balance, so the
    populated data set is the one the load keeps (RSS after a minute is then comparable with
    RSS at the end). Per key-write: puts recreate, deletes remove, insert_many adds absent
    keys only; solving delete * present = put * absent + inserts for `present`."""
    weights = dict(OPERATIONS)
    puts = weights["replace"] + weights["crud.replace"]
    deletes = weights["delete"] + weights["crud.delete"]
    inserts = weights["crud.insert_many"] * INSERT_MANY_TUPLES * (1 - INSERT_MANY_DUPLICATE_SHARE)
    return min(0.98, max(0.5, (puts + inserts) / (puts + deletes)))


def initially_present(key):
    return (_mix(key, 0) % 1000) < initial_present_share() * 1000


# --- the wire ----------------------------------------------------------------------------

# The requests of the mix are built from bytes: iproto.pack, general and recursive, cost a
# third of a worker's time (profiled). `check_encoders` holds these to pack's output.

def mp_uint(value):
    if value < 0x80:
        return bytes((value,))
    if value < 0x100:
        return b"\xcc" + bytes((value,))
    if value < 0x10000:
        return b"\xcd" + value.to_bytes(2, "big")
    return b"\xce" + value.to_bytes(4, "big")


def mp_str(text):
    data = text.encode()
    if len(data) < 32:
        return bytes((0xA0 | len(data),)) + data
    if len(data) < 0x100:
        return b"\xd9" + bytes((len(data),)) + data
    return b"\xda" + len(data).to_bytes(2, "big") + data


def encode_tuple(space, key, state, bucket):
    """pack(tuple_of(space, key, state, bucket)); bucket None is msgpack nil."""
    bucket_bytes = b"\xc0" if bucket is None else mp_uint(bucket)
    if space == KV:
        return b"\x93" + mp_uint(key) + bucket_bytes + mp_str(kv_value(key, state))
    a, b, c, d, name = customer_fields(key, state)
    return (b"\x97" + mp_uint(key) + bucket_bytes + mp_uint(a) + mp_uint(b) + mp_uint(c)
            + mp_uint(d) + mp_str(name))


def frame(request_type, sync, body):
    payload = b"\x82\x00" + bytes((request_type,)) + b"\x01\xce" + struct.pack(">I", sync) + body
    return b"\xce" + struct.pack(">I", len(payload)) + payload


SELECT_PREFIXES = {}


def select_body(space, index, key, limit, iterator):
    """`key` is a list of unsigned ints."""
    prefix = SELECT_PREFIXES.get((space, index, limit, iterator))
    if prefix is None:
        prefix = pack({0x10: space, 0x11: index, 0x12: limit, 0x13: 0, 0x14: iterator,
                       0x20: []})[:-1]
        SELECT_PREFIXES[space, index, limit, iterator] = prefix
    return prefix + bytes((0x90 | len(key),)) + b"".join(mp_uint(part) for part in key)


def replace_body(space, tuple_bytes):
    return b"\x82\x10" + mp_uint(space) + b"\x21" + tuple_bytes


def delete_body(space, key):
    return b"\x83\x10" + mp_uint(space) + b"\x11\x00\x20\x91" + mp_uint(key)


def call_body(function, args_bytes):
    return b"\x82\x22" + mp_str(function) + b"\x21" + args_bytes


def crud_key_args(space, key):
    """[space name, key, {}] of crud.get and crud.delete."""
    return b"\x93" + mp_str(SPACE_NAMES[space]) + mp_uint(key) + b"\x80"


def crud_tuple_args(space, tuple_bytes):
    """[space name, tuple, {}] of crud.replace."""
    return b"\x93" + mp_str(SPACE_NAMES[space]) + tuple_bytes + b"\x80"


def check_encoders():
    for key, state in ((0, 0), (7, 3), (300, 12), (70000, 123456), (99999, 5)):
        for space in (KV, CUSTOMERS):
            for bucket in (None, bucket_of(key)):
                assert encode_tuple(space, key, state, bucket) == pack(
                    tuple_of(space, key, state, bucket)), (space, key, state, bucket)
        assert select_body(KV, 0, [key], 1, ITERATOR_EQ) == pack(
            {0x10: KV, 0x11: 0, 0x12: 1, 0x13: 0, 0x14: ITERATOR_EQ, 0x20: [key]})
        assert delete_body(CUSTOMERS, key) == pack({0x10: CUSTOMERS, 0x11: 0, 0x20: [key]})
        assert call_body("crud.get", crud_key_args(KV, key)) == pack(
            {0x22: "crud.get", 0x21: ["kv", key, {}]})
    assert mp_str(FILLER[:300]) == pack(FILLER[:300])


def uint_at(data, at):
    marker = data[at]
    if marker < 0x80:
        return marker, at + 1
    width = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}[marker]
    return int.from_bytes(data[at + 1:at + 1 + width], "big"), at + 1 + width


def reply_header(packet):
    """(code, sync, offset of the body) of a reply packet. tarn writes its header as
    {0x00: code, 0x01: sync, 0x05: schema version}, read here by hand; any other shape
    goes through the general decoder."""
    if packet[0] == 0x83 and packet[1] == 0x00:
        code, at = uint_at(packet, 2)
        if packet[at] == 0x01:
            sync, at = uint_at(packet, at + 1)
            if packet[at] == 0x05:
                return (code, sync) + (uint_at(packet, at + 1)[1],)
    header, at = unpack(packet)
    return header.get(0x00, 0), header.get(0x01), at


# What a get's (resp. crud.get's) reply ends with, as tarn encodes it: a check compares
# these bytes first, and decodes the reply only when they differ.
GET_ONE, GET_NONE = b"\x81\x30\xdd\x00\x00\x00\x01", b"\x81\x30\xdd\x00\x00\x00\x00"
CRUD_ROWS_ONE, CRUD_ROWS_NONE = b"\xa4rows\x91", b"\xa4rows\x90\xc0"


class IndexedSet:
    """A set with O(1) add, remove and random choice (the absent keys insert_many draws)."""

    def __init__(self):
        self.items, self.positions = [], {}

    def add(self, item):
        if item not in self.positions:
            self.positions[item] = len(self.items)
            self.items.append(item)

    def discard(self, item):
        at = self.positions.pop(item, None)
        if at is not None:
            last = self.items.pop()
            if at < len(self.items):
                self.items[at] = last
                self.positions[last] = at

    def sample(self, rng, count):
        if len(self.items) <= count:
            return list(self.items)
        return rng.sample(self.items, count)


class Model:
    """A worker's knowledge of its own keys of one space."""

    def __init__(self, space, key_count, worker, workers):
        self.space = space
        self.keys = list(range(worker, key_count, workers))
        self.acked = {}  # key -> state of the last acknowledged write (or of the population)
        self.in_flight = {}  # key -> the state the write in flight would leave
        self.writes_sent = {}  # key -> writes sent so far (a read checks none was sent meanwhile)
        self.absent = IndexedSet()
        for key in self.keys:
            state = 0 if initially_present(key) else ABSENT
            self.acked[key] = state
            self.writes_sent[key] = 0
            if state == ABSENT:
                self.absent.add(key)

    def start_write(self, key, state):
        assert key not in self.in_flight
        self.in_flight[key] = state
        self.writes_sent[key] += 1

    def acknowledge(self, key, applied):
        state = self.in_flight.pop(key)
        if applied:
            self.acked[key] = state
            if state == ABSENT:
                self.absent.add(key)
            else:
                self.absent.discard(key)

    def free_key(self, rng):
        """A random own key with no write in flight (None after a few unlucky draws)."""
        for _ in range(8):
            key = self.keys[rng.randrange(len(self.keys))]
            if key not in self.in_flight:
                return key
        return None


class Connection:
    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=30)
        greeting = b""
        while len(greeting) < 128:
            chunk = self.sock.recv(128 - len(greeting))
            if not chunk:
                raise ConnectionError("tarn closed the connection before its greeting")
            greeting += chunk
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.out = bytearray()
        self.inbox = bytearray()
        self.pending = {}  # sync -> what the reply completes
        self.sync = 0
        self.alive = True  # until the server's end of it is gone and every byte read

    def replies(self):
        """Complete replies received so far, consumed: (code, sync, packet, body offset)."""
        buf, at, done = self.inbox, 0, []
        while len(buf) - at >= 5:
            if buf[at] != 0xCE:
                raise ValueError(f"unexpected size prefix 0x{buf[at]:02x}")
            size = int.from_bytes(buf[at + 1:at + 5], "big")
            if len(buf) - at - 5 < size:
                break
            packet = bytes(buf[at + 5:at + 5 + size])
            at += 5 + size
            code, sync, body_at = reply_header(packet)
            done.append((code, sync, packet, body_at))
        if at:
            del buf[:at]
        return done


# --- one worker --------------------------------------------------------------------------

class Worker:
    def __init__(self, index, args, address, stats):
        self.index, self.args, self.address, self.stats = index, args, address, stats
        self.rng = random.Random(args.seed * 1000 + index)
        self.models = {KV: Model(KV, args.kv_keys, index, args.workers),
                       CUSTOMERS: Model(CUSTOMERS, args.customer_keys, index, args.workers)}
        self.buckets = [bucket_of(k) for k in range(max(args.kv_keys, args.customer_keys))]
        self.counts = [0] * STATS
        self.next_state = 1
        ops, weights = zip(*[(i, w) for i, (_, w) in enumerate(OPERATIONS)])
        self.op_table = self.rng.choices(ops, weights, k=4096)
        self.op_at = 0
        self.unexpected = []  # the first few unexpected replies, for the report
        # Set when a connection finds the server gone (the kill): no more requests, only
        # the replies that arrived before it are read.
        self.server_gone = False

    def publish(self):
        base = self.index * STATS
        for i, value in enumerate(self.counts):
            self.stats[base + i] = value

    def new_state(self):
        self.next_state += 1
        return self.next_state

    def note_unexpected(self, what):
        self.counts[STAT_ERRORS] += 1
        if len(self.unexpected) < 5:
            self.unexpected.append(what)

    # Each make_* returns (request type, body, completion) or None when its key is busy.

    def make_request(self, op):
        rng, models = self.rng, self.models
        if op in (OP_GET, OP_CRUD_GET):
            model = models[KV] if rng.random() < KV_WRITE_SHARE else models[CUSTOMERS]
            key = model.keys[rng.randrange(len(model.keys))]
            check = None if key in model.in_flight else (model.writes_sent[key], model.acked[key])
            completion = (op, model, key, check)
            if op == OP_GET:
                body = select_body(model.space, 0, [key], 1, ITERATOR_EQ)
                return REQUEST_SELECT, body, completion
            return REQUEST_CALL, call_body("crud.get", crud_key_args(model.space, key)), completion
        if op in (OP_REPLACE, OP_CRUD_REPLACE, OP_DELETE, OP_CRUD_DELETE):
            model = models[KV] if rng.random() < KV_WRITE_SHARE else models[CUSTOMERS]
            key = model.free_key(rng)
            if key is None:
                return None
            completion = (op, model, key, None)
            if op in (OP_DELETE, OP_CRUD_DELETE):
                model.start_write(key, ABSENT)
                if op == OP_DELETE:
                    return REQUEST_DELETE, delete_body(model.space, key), completion
                body = call_body("crud.delete", crud_key_args(model.space, key))
                return REQUEST_CALL, body, completion
            state = self.new_state()
            model.start_write(key, state)
            if op == OP_REPLACE:
                tuple_bytes = encode_tuple(model.space, key, state, self.buckets[key])
                return REQUEST_REPLACE, replace_body(model.space, tuple_bytes), completion
            # crud fills bucket_id in from the key.
            tuple_bytes = encode_tuple(model.space, key, state, None)
            body = call_body("crud.replace", crud_tuple_args(model.space, tuple_bytes))
            return REQUEST_CALL, body, completion
        if op == OP_SELECT_KV:
            key = rng.randrange(self.args.kv_keys)
            return (REQUEST_SELECT, select_body(KV, 0, [key], RANGE_LIMIT, ITERATOR_GE),
                    (op, None, None, None))
        if op == OP_SELECT_COMPOSITE:
            key = [rng.randrange(1000), rng.randrange(1000)]
            return (REQUEST_SELECT, select_body(CUSTOMERS, 1, key, RANGE_LIMIT, ITERATOR_GE),
                    (op, None, None, None))
        if op == OP_CRUD_SELECT:
            if rng.random() < 0.5:
                args = ["kv", [[">=", "id", rng.randrange(self.args.kv_keys)]],
                        {"first": RANGE_LIMIT}]
            else:
                args = ["customers", [[">=", "composite", [rng.randrange(1000)]],
                                      ["<", "d", 500]], {"first": RANGE_LIMIT}]
            return REQUEST_CALL, call_body("crud.select", pack(args)), (op, None, None, None)
        if op == OP_CRUD_INSERT_MANY:
            return self.make_insert_many()
        raise AssertionError(op)

    def make_insert_many(self):
        model, rng = self.models[KV], self.rng
        keys = [k for k in model.absent.sample(rng, INSERT_MANY_TUPLES) if k not in model.in_flight]
        if not keys:
            return None
        batch = []
        for key in keys:
            state = self.new_state()
            model.start_write(key, state)
            tuple_ = kv_tuple(key, state, None)
            batch.append(tuple_)
        duplicate = None
        if rng.random() < INSERT_MANY_DUPLICATE_SHARE:
            key = model.free_key(rng)
            if key is not None and model.acked[key] != ABSENT:
                duplicate = key
                # Its insert fails, so the write leaves the key as it is.
                model.start_write(key, model.acked[key])
                batch.insert(rng.randrange(len(batch) + 1), [key, None, "duplicate"])
        args = ["kv", batch, {"rollback_on_error": True}]
        return REQUEST_CALL, call_body("crud.insert_many", pack(args)), (OP_CRUD_INSERT_MANY, model,
                                                                         keys, duplicate)

    def complete(self, completion, code, packet, body_at):
        op, model, key, extra = completion
        self.counts[op] += 1
        failed = bool(code & 0x8000)
        if op == OP_CRUD_INSERT_MANY:
            self.complete_insert_many(model, key, extra, failed, packet, body_at)
            return
        if failed:
            message = unpack(packet, body_at)[0].get(0x31, "") if body_at < len(packet) else ""
            self.note_unexpected(f"{OP_NAMES[op]} answered error {code & 0x7FFF}: {message}")
            if op in WRITES:
                model.acknowledge(key, applied=False)
            return
        if op in (OP_GET, OP_CRUD_GET):
            if extra is not None:
                self.check_read(op, model, key, extra, packet, body_at)
            return
        if op in (OP_REPLACE, OP_DELETE):
            model.acknowledge(key, applied=True)
            self.counts[STAT_ACKED_WRITES] += 1
            return
        if op in (OP_CRUD_REPLACE, OP_CRUD_DELETE):
            # [result, nil] on success, [nil, error] on failure: the last byte is the nil.
            if packet[-1] != 0xC0:
                model.acknowledge(key, applied=False)
                self.note_unexpected(f"{OP_NAMES[op]} returned {unpack(packet, body_at)[0]}")
                return
            model.acknowledge(key, applied=True)
            self.counts[STAT_ACKED_WRITES] += 1
            return
        if op == OP_CRUD_SELECT and packet[-1] != 0xC0:
            self.note_unexpected(f"crud.select returned {unpack(packet, body_at)[0]}")

    def complete_insert_many(self, model, keys, duplicate, failed, packet, body_at):
        inserted = set()
        if failed:
            self.note_unexpected("crud.insert_many answered an IPROTO error")
        else:
            result, errors = unpack(packet, body_at)[0].get(0x30, [None, None])
            if result:
                inserted = {row[0] for row in result.get("rows", [])}
            if errors and duplicate is None:
                self.note_unexpected(f"crud.insert_many of absent keys failed: {errors[:1]}")
            if duplicate is not None and not errors:
                self.note_unexpected(f"crud.insert_many of existing key {duplicate} succeeded")
            if duplicate in inserted:
                self.note_unexpected(f"crud.insert_many returned duplicate key {duplicate}")
        for key in keys:
            model.acknowledge(key, applied=key in inserted)
            self.counts[STAT_ACKED_WRITES] += 1
        if duplicate is not None:
            model.acknowledge(duplicate, applied=True)  # unchanged: its state is the old one

    def check_read(self, op, model, key, check, packet, body_at):
        writes_sent, state = check
        if model.writes_sent[key] != writes_sent:
            return  # a write was sent meanwhile: either answer would be right
        self.counts[STAT_READS_CHECKED] += 1
        if state == ABSENT:
            fast = packet[body_at:] == GET_NONE if op == OP_GET else packet.endswith(CRUD_ROWS_NONE)
        else:
            tuple_bytes = encode_tuple(model.space, key, state, self.buckets[key])
            fast = (packet[body_at:] == GET_ONE + tuple_bytes if op == OP_GET
                    else packet.endswith(CRUD_ROWS_ONE + tuple_bytes + b"\xc0"))
        if fast:
            return
        data = unpack(packet, body_at)[0].get(0x30)
        rows = data if op == OP_GET else (data[0] or {}).get("rows") if data else None
        expected = [] if state == ABSENT else [tuple_of(model.space, key, state, self.buckets[key])]
        if rows != expected:
            self.counts[STAT_WRONG_READS] += 1
            if len(self.unexpected) < 5:
                self.unexpected.append(
                    f"{OP_NAMES[op]} {SPACE_NAMES[model.space]} {key}: {rows}, expected {expected}")

    # The event loop.

    def populate(self):
        """Writes the initial state of every own key (IPROTO REPLACE, pipelined)."""
        conn = Connection(self.address)
        conn.sock.setblocking(True)
        for model in self.models.values():
            present = [k for k in model.keys if model.acked[k] != ABSENT]
            for at in range(0, len(present), 256):
                chunk = present[at:at + 256]
                out = bytearray()
                for key in chunk:
                    conn.sync += 1
                    tuple_bytes = encode_tuple(model.space, key, 0, self.buckets[key])
                    out += frame(REQUEST_REPLACE, conn.sync, replace_body(model.space, tuple_bytes))
                conn.sock.sendall(out)
                received = 0
                while received < len(chunk):
                    data = conn.sock.recv(1 << 16)
                    if not data:
                        raise ConnectionError("tarn closed the connection while populating")
                    conn.inbox += data
                    for code, _, packet, body_at in conn.replies():
                        if code & 0x8000:
                            raise RuntimeError(f"populating failed: {unpack(packet, body_at)[0]}")
                        received += 1
        conn.sock.close()

    def run(self, go, stop_at):
        connections = [Connection(self.address) for _ in range(self.args.conns)]
        selector = selectors.DefaultSelector()
        for conn in connections:
            selector.register(conn.sock, selectors.EVENT_READ, conn)
        go.wait()
        published = time.monotonic()
        while any(conn.alive for conn in connections):
            for conn in connections:
                if conn.alive and not self.server_gone:
                    self.fill(conn)
                    self.flush(conn)
            for selector_key, _ in selector.select(timeout=0.1):
                conn = selector_key.data
                self.receive(conn)
                if not conn.alive:
                    selector.unregister(conn.sock)
            now = time.monotonic()
            if now - published > 0.2:
                self.publish()
                published = now
                if now > stop_at:
                    break  # tarn should have been killed long ago
        self.publish()
        for conn in connections:
            conn.sock.close()

    def fill(self, conn):
        pipeline, op_table = self.args.pipeline, self.op_table
        while len(conn.pending) < pipeline:
            op = op_table[self.op_at]
            self.op_at = (self.op_at + 1) & 4095
            made = self.make_request(op)
            if made is None:
                continue
            request_type, body, completion = made
            conn.sync = (conn.sync + 1) & 0xFFFFFFFF
            conn.pending[conn.sync] = completion
            conn.out += frame(request_type, conn.sync, body)

    def flush(self, conn):
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except BlockingIOError:
                return
            except OSError:
                # The kill. What it answered may still wait to be read: `receive` reads
                # on until the end of the stream.
                self.server_gone = True
                return
            del conn.out[:sent]

    def receive(self, conn):
        try:
            data = conn.sock.recv(1 << 18)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            conn.inbox += data
        for code, sync, packet, body_at in conn.replies():
            self.complete(conn.pending.pop(sync), code, packet, body_at)
        if not data:
            # Requests still pending (sent or not) stay in flight in the model.
            conn.alive = False
            self.server_gone = True

    def dump(self, path):
        """The model: per space, the acknowledged and in-flight state of each own key."""
        model = {space: (m.acked, m.in_flight) for space, m in self.models.items()}
        with open(path, "wb") as f:
            marshal.dump({"model": model, "counts": self.counts,
                          "unexpected": self.unexpected}, f)


def worker_main(index, args, address, stats, populated, go, stop_at):
    worker = Worker(index, args, address, stats)
    worker.populate()
    populated.release()
    worker.run(go, stop_at)
    worker.dump(os.path.join(args.work, f"worker-{index}.model"))


# --- the server --------------------------------------------------------------------------

class Tarn:
    def __init__(self, args):
        self.args = args
        self.data_dir = os.path.join(args.work, "data")
        self.starts = 0
        self.process = None
        self.address = None

    def log_path(self):
        return os.path.join(self.args.work, f"tarn-{self.starts}.log")

    def start(self):
        self.starts += 1
        command = [self.args.tarn_bin, "--config", self.args.tarn_config,
                   "--listen", "127.0.0.1:0", "--shards", str(self.args.shards),
                   "--data-dir", self.data_dir, "--wal-mode", "write"]
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="info")
        started = time.monotonic()
        with open(self.log_path(), "wb") as log_file:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                            stderr=log_file, env=env)
        while True:
            with open(self.log_path(), errors="replace") as log_file:
                match = LISTENING.search(log_file.read())
            if match:
                host, port = match.group(1).rsplit(":", 1)
                self.address = (host, int(port))
                return time.monotonic() - started
            if self.process.poll() is not None:
                raise RuntimeError(f"tarn exited with {self.process.returncode} at start; "
                                   f"see {self.log_path()}")
            if time.monotonic() - started > START_TIMEOUT_SECONDS:
                raise RuntimeError(f"tarn did not listen in {START_TIMEOUT_SECONDS}s")
            time.sleep(0.05)

    def rss_bytes(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc/PID/status")

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def read_space(address, space):
    """Every tuple of `space` by primary key, in pages (GT after the last key seen)."""
    rows = {}
    duplicates = 0
    with Client(*address, timeout_seconds=120) as client:
        after, iterator = [], ITERATOR_GE
        while True:
            page = client.select(space, 0, after, limit=5000, iterator=iterator)
            for row in page:
                if row[0] in rows:
                    duplicates += 1
                rows[row[0]] = row
            if len(page) < 5000:
                break
            after, iterator = [page[-1][0]], ITERATOR_GT
    return rows, duplicates


class Snapshots(threading.Thread):
    """Calls box.snapshot under the load: at `first` (monotonic), then every
    `interval_seconds` until `end`. The first comes before the RSS baseline is taken: a
    snapshot holds a copy of every tuple handle and, until it is written, the old versions
    of tuples replaced meanwhile, and the heap keeps that high-water mark (measured with
    120,000 rows on 2 shards: +6 to +12 MiB at the first snapshot; with one every 4 s, then
    +1.3 MiB at the second, falling to +0.1-0.2 MiB at the tenth to twelfth)."""

    def __init__(self, address, first, interval_seconds, end):
        super().__init__(daemon=True)
        self.address, self.first, self.end = address, first, end
        self.interval_seconds = interval_seconds
        self.seconds = []  # how long each one took
        self.failures = []
        self.reported = 0

    def run(self):
        if not self.interval_seconds:
            return
        next_at = self.first
        while next_at < self.end - 1:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += self.interval_seconds
            started = time.monotonic()
            try:
                with Client(*self.address, timeout_seconds=120) as client:
                    client.call("box.snapshot")
                self.seconds.append(time.monotonic() - started)
            except Exception as error:  # noqa: BLE001 - reported as the verdict's reason
                self.failures.append(f"{type(error).__name__}: {error}")
                return

    def since_last_line(self):
        """A note for the throughput line when a snapshot finished since the previous one."""
        done = len(self.seconds)
        note = "" if done == self.reported else f"  (box.snapshot {self.seconds[-1]:.2f}s)"
        self.reported = done
        return note


# --- the run -----------------------------------------------------------------------------

def mib(size_bytes):
    return size_bytes / (1024 * 1024)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tarn-bin", required=True)
    parser.add_argument("--tarn-config", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--pipeline", type=int, default=64)
    parser.add_argument("--interval", type=float, default=0)
    parser.add_argument("--kv-keys", type=int, default=100000)
    parser.add_argument("--customer-keys", type=int, default=20000)
    parser.add_argument("--rss-tolerance", type=float, default=0.05)
    parser.add_argument("--snapshot-interval", type=float, default=0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    check_encoders()
    interval = args.interval or min(10.0, max(1.0, args.seconds / 12))
    baseline_seconds = min(60.0, args.seconds / 6)

    tarn = Tarn(args)
    tarn.start()
    log(f"tarn pid {tarn.process.pid} on {tarn.address[0]}:{tarn.address[1]}, --shards "
        f"{args.shards} --wal-mode write, data in {tarn.data_dir}")
    try:
        return soak(args, tarn, interval, baseline_seconds)
    finally:
        tarn.stop()


def soak(args, tarn, interval, baseline_seconds):
    context = multiprocessing.get_context("fork")
    stats = context.Array("q", args.workers * STATS, lock=False)
    populated = context.Semaphore(0)
    go = context.Event()
    # A worker gives up by itself well after the kill should have come.
    stop_at = time.monotonic() + args.seconds + 600
    workers = [context.Process(target=worker_main, name=f"soak-worker-{i}", daemon=True,
                               args=(i, args, tarn.address, stats, populated, go, stop_at))
               for i in range(args.workers)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    log(f"populating {args.kv_keys} kv and {args.customer_keys} customers keys "
        f"({initial_present_share():.0%} present) from {args.workers} workers...")
    for _ in workers:
        while not populated.acquire(timeout=1):
            for worker in workers:
                if worker.exitcode not in (None, 0):
                    raise RuntimeError(f"{worker.name} failed while populating")
    log(f"populated in {time.monotonic() - started:.1f}s; {args.seconds}s of load from "
        f"{args.workers} workers x {args.conns} connections x {args.pipeline} in flight"
        + (f", box.snapshot at {baseline_seconds / 2:g}s and then every "
           f"{args.snapshot_interval:g}s" if args.snapshot_interval else ""))

    def totals():
        return [sum(stats[w * STATS + i] for w in range(args.workers)) for i in range(STATS)]

    short = ["get", "replace", "delete", "sel_kv", "sel_comp", "c.get", "c.replace",
             "c.delete", "c.select", "c.ins_many"]
    header = f"{'t s':>6} {'RSS MiB':>8} {'total/s':>8} " + " ".join(f"{s:>9}" for s in short)
    print(f"requests per second over each {interval:g}s interval, by operation type:")
    print(header, flush=True)
    go.set()
    load_started = time.monotonic()
    snapshots = Snapshots(tarn.address, load_started + baseline_seconds / 2,
                          args.snapshot_interval, load_started + args.seconds)
    snapshots.start()
    previous, previous_at = totals(), load_started
    rss_samples = []  # (seconds since load start, bytes)
    stalled = []  # seconds since load start of each interval without a reply
    baseline = None
    next_at = load_started + interval
    while True:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += interval
        now = time.monotonic()
        if tarn.process.poll() is not None:
            raise RuntimeError(f"tarn exited with {tarn.process.returncode} under load; "
                               f"see {tarn.log_path()}")
        for worker in workers:
            if worker.exitcode is not None:
                raise RuntimeError(f"{worker.name} exited with {worker.exitcode} under load")
        rss = tarn.rss_bytes()
        elapsed = now - load_started
        rss_samples.append((elapsed, rss))
        if baseline is None and elapsed >= baseline_seconds - 0.5:
            baseline = (elapsed, rss)
        current = totals()
        rates = [(current[i] - previous[i]) / (now - previous_at) for i in range(len(OPERATIONS))]
        print(f"{elapsed:6.0f} {mib(rss):8.1f} {sum(rates):8.0f} "
              + " ".join(f"{r:9.0f}" for r in rates) + snapshots.since_last_line(), flush=True)
        previous, previous_at = current, now
        if sum(rates) == 0:
            stalled.append(elapsed)
        if elapsed >= args.seconds - 0.5:
            break

    load_seconds = time.monotonic() - load_started
    end_rss = rss_samples[-1][1]
    snapshots.join()
    log("kill -9 tarn under load...")
    tarn.kill9()
    for worker in workers:
        worker.join(DRAIN_TIMEOUT_SECONDS)
        if worker.exitcode != 0:
            raise RuntimeError(f"{worker.name} did not end cleanly after the kill "
                               f"(exit code {worker.exitcode})")
    recovery_seconds = tarn.start()
    log(f"restarted on the same data dir; listening after {recovery_seconds:.1f}s")

    counts = [0] * STATS
    unexpected = []
    acked = {KV: {}, CUSTOMERS: {}}
    in_flight = {KV: {}, CUSTOMERS: {}}
    for index in range(args.workers):
        with open(os.path.join(args.work, f"worker-{index}.model"), "rb") as f:
            dumped = marshal.load(f)
        counts = [a + b for a, b in zip(counts, dumped["counts"])]
        unexpected += dumped["unexpected"]
        for space, (space_acked, space_in_flight) in dumped["model"].items():
            acked[space].update(space_acked)
            in_flight[space].update(space_in_flight)

    wrong, extra, duplicates, present = [], 0, 0, 0
    in_flight_landed = 0
    for space in (KV, CUSTOMERS):
        rows, space_duplicates = read_space(tarn.address, space)
        duplicates += space_duplicates
        extra += sum(1 for key in rows if key not in acked[space])
        for key, state in acked[space].items():
            row = rows.get(key)
            bucket = bucket_of(key)
            allowed = [state] + ([in_flight[space][key]] if key in in_flight[space] else [])
            expected = [None if s == ABSENT else tuple_of(space, key, s, bucket) for s in allowed]
            if row is not None:
                present += 1
            if row == expected[0]:
                continue
            if len(expected) > 1 and row == expected[1]:
                in_flight_landed += 1
                continue
            wrong.append(f"{SPACE_NAMES[space]} {key}: {row}; expected {expected[0]}"
                         + (f" or {expected[1]} (in flight)" if len(expected) > 1 else ""))

    total_ops = sum(counts[:len(OPERATIONS)])
    print()
    print(f"load: {load_seconds:.0f}s, {total_ops:,} requests ({total_ops / load_seconds:,.0f}/s), "
          f"tarn --shards {args.shards} --wal-mode write, {args.workers} workers x "
          f"{args.conns} connections x {args.pipeline} in flight, {os.cpu_count()} cores shared")
    print("requests by type: "
          + ", ".join(f"{name} {counts[i]:,}" for i, name in enumerate(OP_NAMES)))
    verdicts = []

    base_at, base_rss = baseline
    drift = (end_rss - base_rss) / base_rss
    rss_ok = abs(drift) <= args.rss_tolerance
    low = min(r for _, r in rss_samples)
    high = max(r for _, r in rss_samples)
    print(f"RSS after {base_at:.0f}s: {mib(base_rss):.1f} MiB; at the end "
          f"({rss_samples[-1][0]:.0f}s): {mib(end_rss):.1f} MiB ({drift:+.1%}, "
          f"limit ±{args.rss_tolerance:.0%}); "
          f"range over the run {mib(low):.1f}-{mib(high):.1f} MiB")
    verdicts.append(("RSS stable", rss_ok))

    errors_ok = counts[STAT_ERRORS] == 0 and counts[STAT_WRONG_READS] == 0
    print(f"during the load: {counts[STAT_ERRORS]} unexpected replies; "
          f"{counts[STAT_READS_CHECKED]:,} reads of own keys checked, "
          f"{counts[STAT_WRONG_READS]} wrong")
    for line in unexpected:
        print(f"  {line}")
    verdicts.append(("replies and reads as expected", errors_ok))
    if stalled:
        ends = ", ".join(f"{t:.0f}s" for t in stalled)
        print(f"no reply at all in the intervals ending at {ends}")
    verdicts.append(("replies in every interval, up to the kill", not stalled))

    if args.snapshot_interval:
        took = snapshots.seconds
        print(f"box.snapshot under load: {len(took)} done"
              + (f" ({min(took):.2f}-{max(took):.2f}s each)" if took else "")
              + (f", failed: {snapshots.failures[0]}" if snapshots.failures else ""))
        verdicts.append(("box.snapshot under load", not snapshots.failures))

    keys_checked = sum(len(a) for a in acked.values())
    keys_in_flight = sum(len(f) for f in in_flight.values())
    durable_ok = not wrong and extra == 0 and duplicates == 0
    print(f"after kill -9 and restart: {counts[STAT_ACKED_WRITES]:,} acknowledged writes, the "
          f"last of each key checked: {keys_checked:,} keys ({present:,} present, "
          f"{keys_checked - present:,} absent), {keys_in_flight} with a write in flight at the "
          f"kill ({in_flight_landed} of them show it); {len(wrong)} wrong, {extra} unknown "
          f"keys, {duplicates} duplicates")
    for line in wrong[:10]:
        print(f"  {line}")
    verdicts.append(("every acknowledged write present after kill -9", durable_ok))

    for path in sorted(p for p in os.listdir(args.work) if p.startswith("tarn-")):
        with open(os.path.join(args.work, path), errors="replace") as f:
            noted = [line.rstrip() for line in f if " WARN " in line or " ERROR " in line]
        if noted:
            print(f"{path} (start {path[5:-4]}) logged {len(noted)} WARN/ERROR lines, the first:")
            for line in noted[:5]:
                print(f"  {line}")

    for name, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
