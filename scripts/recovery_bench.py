#!/usr/bin/env python3
"""Recovery time of tarn vs Tarantool 2.6 after a snapshot of the `customers` space.

Run through scripts/recovery-bench.sh, which builds the binaries and passes the paths. For
each server: start it empty (WAL mode `write`), load ROWS `customers` rows with
`perf-simple-query --load-customers`, `CALL box.snapshot`, stop it with SIGTERM, start it
again on the same data and time the recovery:

* tarn: process start -> the `listening on` log line, and -> the last shard's `shard
  recovered` line (core 0 listens once its own shard has recovered, other shards may still
  be recovering; their requests wait). The latter is tarn's recovery time. The per-shard
  lines give tuples and elapsed_ms.
* Tarantool: process start -> `box.info.status` is 'running' (polled with EVAL). Its port
  answers much earlier: Tarantool 2.6 listens before it loads the snapshot and answers
  SELECTs with empty results while `box.info.status` is 'loading', so the greeting time is
  printed but is not a recovery time. Also -> the `ready` marker instance.lua writes once
  box.cfg has returned.
* both: process start -> a SELECT finds the last loaded row (id ROWS-1).

Each restart is repeated REPEATS times (stop, start); the table shows the median of each
time. Then checks that both hold ROWS rows and the same sampled rows, and prints one table.
"""

import argparse
import datetime
import os
import re
import signal
import statistics
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iproto import Client, IprotoError  # noqa: E402

CUSTOMERS_SPACE_ID = 513
POLL_SECONDS = 0.002
START_TIMEOUT_SECONDS = 600
STOP_TIMEOUT_SECONDS = 120
SHARD_RECOVERED = re.compile(
    r"shard recovered shard=(\d+) tuples=(\d+) rows_replayed=(\d+) lsn=(\d+) elapsed_ms=(\d+)")
LISTENING = re.compile(r"listening on ([0-9.]+:\d+)")
SHARD_COUNT = re.compile(r"starting tarn \S+ .*\bshards=(\d+)")
MIB = 1024 * 1024


def log(text):
    print(text, file=sys.stderr, flush=True)


class Server:
    """A server process this script started, with what its last start measured."""

    def __init__(self, name):
        self.name = name
        self.process = None
        self.address = None
        self.timings = {}

    def stop(self):
        """SIGTERM, wait; returns the seconds to exit (SIGKILL after a timeout)."""
        if self.process is None or self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            log(f"{self.name} did not stop on SIGTERM in {STOP_TIMEOUT_SECONDS}s: SIGKILL")
            self.process.kill()
            self.process.wait()
        return time.monotonic() - started

    def check_alive(self, what):
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode} {what}; "
                               f"see {self.log_path()}")

    def wait_until(self, started, ask, what):
        """Polls `ask(client)` until it returns true; returns seconds since `started`.
        Reconnects after a connection error; an error reply counts as not yet."""
        host, port = self.address
        client = None
        try:
            while True:
                self.check_alive(f"before {what}")
                if time.monotonic() - started > START_TIMEOUT_SECONDS:
                    raise RuntimeError(f"{self.name}: no {what} in {START_TIMEOUT_SECONDS}s")
                try:
                    client = client or Client(host, port, timeout_seconds=START_TIMEOUT_SECONDS)
                    if ask(client):
                        return time.monotonic() - started
                except IprotoError:
                    pass
                except OSError:
                    if client:
                        client.close()
                    client = None
                time.sleep(POLL_SECONDS)
        finally:
            if client:
                client.close()

    def wait_last_row(self, started):
        """Seconds from `started` until a SELECT finds the last loaded row (id ROWS-1)."""
        last_id = self.args.rows - 1
        return self.wait_until(
            started, lambda c: bool(c.select(CUSTOMERS_SPACE_ID, 0, [last_id])),
            "SELECT finding the last row")


class Tarn(Server):
    def __init__(self, args):
        super().__init__("tarn")
        self.args = args
        self.data_dir = os.path.join(args.work, "tarn-data")
        self.starts = 0

    def log_path(self):
        return os.path.join(self.args.work, f"tarn-{self.starts}.log")

    def start(self, recovering=False):
        self.starts += 1
        command = [self.args.tarn_bin, "--config", self.args.tarn_config,
                   "--listen", "127.0.0.1:0", "--shards", str(self.args.shards),
                   "--data-dir", self.data_dir, "--wal-mode", "write"]
        if self.args.tarn_memory:
            command += ["--memory", self.args.tarn_memory]
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="info")
        with open(self.log_path(), "wb") as log_file:
            started = time.monotonic()
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                            stderr=log_file, env=env)
        while True:
            with open(self.log_path(), errors="replace") as log_file:
                match = LISTENING.search(log_file.read())
            if match:
                break
            self.check_alive("before listening")
            if time.monotonic() - started > START_TIMEOUT_SECONDS:
                raise RuntimeError("tarn did not listen in time")
            time.sleep(POLL_SECONDS)
        host, port = match.group(1).rsplit(":", 1)
        self.address = (host, int(port))
        self.timings = {"listening_seconds": time.monotonic() - started}
        # Core 0 listens as soon as its own shard has recovered, while other shards may
        # still be recovering (their requests wait), so "recovered" is the last shard's line.
        while True:
            with open(self.log_path(), errors="replace") as log_file:
                text = log_file.read()
            shards = int(SHARD_COUNT.search(text).group(1))
            if len(SHARD_RECOVERED.findall(text)) >= shards:
                break
            self.check_alive("before every shard recovered")
            time.sleep(POLL_SECONDS)
        self.timings["recovered_seconds"] = time.monotonic() - started
        if recovering:
            self.timings["last_row_seconds"] = self.wait_last_row(started)

    def shard_lines(self):
        with open(self.log_path(), errors="replace") as log_file:
            return [tuple(int(x) for x in m.groups())
                    for m in SHARD_RECOVERED.finditer(log_file.read())]

    def snapshot_bytes(self):
        """Sum over shards of each shard's newest snapshot file."""
        total = 0
        for entry in sorted(os.listdir(self.data_dir)):
            shard_dir = os.path.join(self.data_dir, entry)
            if entry.startswith("shard-") and os.path.isdir(shard_dir):
                snaps = sorted(f for f in os.listdir(shard_dir) if f.endswith(".snap"))
                if snaps:
                    total += os.path.getsize(os.path.join(shard_dir, snaps[-1]))
        return total

    def wal_bytes(self):
        return dir_bytes(self.data_dir, ".wal")


class Tarantool(Server):
    def __init__(self, args):
        super().__init__("Tarantool")
        self.args = args
        self.work_dir = os.path.join(args.work, "tarantool")
        self.address = ("127.0.0.1", args.tarantool_port)
        os.makedirs(self.work_dir, exist_ok=True)

    def log_path(self):
        return os.path.join(self.work_dir, "tarantool.log")

    def start(self, recovering=False):
        ready = os.path.join(self.work_dir, "ready")
        if os.path.exists(ready):
            os.remove(ready)
        env = dict(os.environ, TARANTOOL_WAL_MODE="write")
        command = ["tarantool", self.args.instance_lua, str(self.args.tarantool_port),
                   self.work_dir]
        with open(os.path.join(self.work_dir, "stdout.log"), "ab") as out:
            started = time.monotonic()
            self.process = subprocess.Popen(command, stdout=out, stderr=out, env=env,
                                            stdin=subprocess.DEVNULL)
        self.start_wall = time.time()
        self.timings = {"greeting_seconds": self.wait_greeting(started)}
        # Tarantool answers requests while it loads the snapshot (box.info.status is
        # 'loading' and selects find nothing), so the greeting does not mean recovered.
        self.timings["running_seconds"] = self.wait_until(
            started, lambda c: c.eval("return box.info.status")[0] == "running",
            "box.info.status == 'running'")
        if recovering:
            self.timings["last_row_seconds"] = self.wait_last_row(started)
        while not os.path.exists(ready):
            self.check_alive("before writing its ready marker")
            time.sleep(POLL_SECONDS)
        self.timings["ready_marker_seconds"] = time.monotonic() - started

    def wait_greeting(self, started):
        """Seconds from `started` until a connection reads the 128-byte greeting."""
        while True:
            self.check_alive("before greeting")
            try:
                with socket.create_connection(self.address, timeout=START_TIMEOUT_SECONDS) as s:
                    greeting = b""
                    while len(greeting) < 9:
                        chunk = s.recv(9 - len(greeting))
                        if not chunk:
                            break
                        greeting += chunk
                    if greeting == b"Tarantool":
                        return time.monotonic() - started
            except OSError:
                pass
            if time.monotonic() - started > START_TIMEOUT_SECONDS:
                raise RuntimeError("Tarantool did not answer in time")
            time.sleep(POLL_SECONDS)

    def snapshot_bytes(self):
        snaps = sorted(f for f in os.listdir(self.work_dir) if f.endswith(".snap"))
        return os.path.getsize(os.path.join(self.work_dir, snaps[-1])) if snaps else 0

    def wal_bytes(self):
        return dir_bytes(self.work_dir, ".xlog")

    def recovery_log_lines(self):
        """The log lines of the last start that mark recovery steps, with seconds since start."""
        pid = f"[{self.process.pid}]"
        marks = ("recovery start", "recovering from", "building secondary indexes",
                 "ready to accept requests", "Recover from")
        out = []
        with open(self.log_path(), errors="replace") as log_file:
            for line in log_file:
                if pid not in line or not any(mark in line for mark in marks):
                    continue
                try:
                    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
                except ValueError:
                    continue
                out.append((stamp.timestamp() - self.start_wall, line[24:].strip()))
        return out


def dir_bytes(root, suffix):
    total = 0
    for directory, _, files in os.walk(root):
        total += sum(os.path.getsize(os.path.join(directory, f))
                     for f in files if f.endswith(suffix))
    return total


def load(args, server):
    """Loads the rows with perf-simple-query; returns its JSON numbers."""
    result = os.path.join(args.work, f"load-{server.name}.json")
    host, port = server.address
    command = [args.perf_bin, "--connect", f"{host}:{port}", "--load-customers", str(args.rows),
               "--conns", str(args.conns), "--pipeline", str(args.pipeline),
               "--smp", str(args.client_smp), "--random-seed", str(args.seed),
               "--json-result", result]
    log("  " + " ".join(command))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(result) as f:
        text = f.read()
    return {
        "seconds": float(re.search(r'"elapsed_seconds": ([0-9.e+-]+)', text).group(1)),
        "rows_per_second": float(re.search(r'"rows_per_second": ([0-9.e+-]+)', text).group(1)),
    }


def snapshot(server):
    started = time.monotonic()
    with Client(*server.address, timeout_seconds=START_TIMEOUT_SECONDS) as client:
        client.call("box.snapshot")
    return time.monotonic() - started


def sample_ids(rows):
    return sorted({0, 1, rows // 3, rows // 2, rows - 2, rows - 1})


def sample_rows(server, rows):
    with Client(*server.address) as client:
        return {i: client.select(CUSTOMERS_SPACE_ID, 0, [i]) for i in sample_ids(rows)}


def bench(args, server, count_rows):
    """Load, snapshot, stop, restart; returns the facts of the run."""
    facts = {}
    log(f"{server.name}: starting empty")
    server.start()
    log(f"{server.name}: loading {args.rows} customers rows")
    facts["load"] = load(args, server)
    log(f"{server.name}: loaded in {facts['load']['seconds']:.1f}s; box.snapshot")
    facts["snapshot_seconds"] = snapshot(server)
    facts["snapshot_bytes"] = server.snapshot_bytes()
    facts["stop_seconds"] = server.stop()
    facts["wal_bytes"] = server.wal_bytes()
    log(f"{server.name}: snapshot {facts['snapshot_bytes'] / MIB:.1f} MiB in "
        f"{facts['snapshot_seconds']:.2f}s; stopped; restarting")
    runs = []
    for repeat in range(args.repeats):
        if repeat:
            server.stop()
        server.start(recovering=True)
        runs.append(dict(server.timings))
        log(f"  restart {repeat + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[-1].items()))
    facts["recovery"] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    facts["recovery_runs"] = runs
    facts["rows_after"] = count_rows(server)
    facts["sample"] = sample_rows(server, args.rows)
    log(f"{server.name}: recovered {facts['rows_after']} rows: {facts['recovery']}")
    return facts


def table(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def report(args, tarn, tarn_facts, tarantool_facts):
    t, r = tarn_facts, tarantool_facts
    t_recovery = t["recovery"]["recovered_seconds"]
    r_recovery = r["recovery"]["running_seconds"]
    t_last, r_last = t["recovery"]["last_row_seconds"], r["recovery"]["last_row_seconds"]
    rows = args.rows

    def seconds(x):
        return f"{x:.2f}"

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "n/a"

    def rate(x):
        return f"{rows / x:,.0f}"

    lines = [
        ("", "tarn", "Tarantool 2.6", "tarn / Tarantool"),
        ("load time, s", seconds(t["load"]["seconds"]), seconds(r["load"]["seconds"]),
         ratio(t["load"]["seconds"], r["load"]["seconds"])),
        ("load rate, rows/s", f"{t['load']['rows_per_second']:,.0f}",
         f"{r['load']['rows_per_second']:,.0f}",
         ratio(t["load"]["rows_per_second"], r["load"]["rows_per_second"])),
        ("box.snapshot, s", seconds(t["snapshot_seconds"]), seconds(r["snapshot_seconds"]),
         ratio(t["snapshot_seconds"], r["snapshot_seconds"])),
        ("snapshot size, MiB", f"{t['snapshot_bytes'] / MIB:.1f}",
         f"{r['snapshot_bytes'] / MIB:.1f}", ratio(t["snapshot_bytes"], r["snapshot_bytes"])),
        ("WAL on disk at restart, MiB", f"{t['wal_bytes'] / MIB:.1f}",
         f"{r['wal_bytes'] / MIB:.1f}", ratio(t["wal_bytes"], r["wal_bytes"])),
        ("port answers (tarn: `listening on`; Tarantool: greeting), s",
         seconds(t["recovery"]["listening_seconds"]),
         seconds(r["recovery"]["greeting_seconds"]), "(not recovery)"),
        ("recovery: start -> all shards recovered / status 'running', s", seconds(t_recovery),
         seconds(r_recovery), ratio(t_recovery, r_recovery)),
        ("recovery: start -> SELECT finds the last row, s", seconds(t_last), seconds(r_last),
         ratio(t_last, r_last)),
        ("recovery rate, rows/s", rate(t_recovery), rate(r_recovery),
         ratio(r_recovery, t_recovery)),
        ("rows after restart", f"{t['rows_after']:,}", f"{r['rows_after']:,}", ""),
    ]
    print()
    print(f"recovery of {rows:,} customers rows (3 TREE indexes) after box.snapshot; "
          f"tarn --shards {args.shards} --wal-mode write, Tarantool wal_mode=write; "
          f"{os.cpu_count()} cores; loader {args.conns} conns x {args.pipeline} in flight; "
          f"recovery times: median of {args.repeats} restarts")
    print(table(lines))
    print("(ratio column: tarn / Tarantool, except recovery rate: the speed-up, Tarantool time "
          "/ tarn time)")
    print()
    print("tarn shards (from `shard recovered`):")
    print(table([("shard", "tuples", "rows_replayed", "elapsed_ms", "rows/s")] + [
        (str(s), f"{n:,}", f"{replayed:,}", f"{ms:,}", f"{n / max(ms, 1) * 1000:,.0f}")
        for s, n, replayed, _, ms in sorted(tarn.shard_lines())]))
    print(f"Tarantool box.cfg returned (ready marker) at "
          f"{r['recovery']['ready_marker_seconds']:.2f}s")
    for name, facts, key in (("tarn", t, "recovered_seconds"), ("Tarantool", r, "running_seconds")):
        print(f"{name} recovery per restart, s: "
              + ", ".join(f"{run[key]:.2f}" for run in facts["recovery_runs"]))
    speedup = r_recovery / t_recovery
    print()
    print(f"goal: tarn recovers >= 3x faster: {'MET' if speedup >= 3 else 'NOT MET'} "
          f"({speedup:.2f}x: start -> last `shard recovered` vs start -> status 'running'; "
          f"{r_last / t_last:.2f}x on start -> last row found)")
    smaller = t["snapshot_bytes"] <= r["snapshot_bytes"]
    print(f"goal: tarn snapshot no larger: {'MET' if smaller else 'NOT MET'} "
          f"({t['snapshot_bytes']:,} vs {r['snapshot_bytes']:,} bytes)")
    same = t["sample"] == r["sample"]
    print(f"sampled rows {sample_ids(rows)} identical in both servers: {'yes' if same else 'NO'}")
    if not same:
        print(f"  tarn:      {t['sample']}\n  Tarantool: {r['sample']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tarn-bin", required=True)
    parser.add_argument("--tarn-config", required=True)
    parser.add_argument("--tarn-memory", default="")
    parser.add_argument("--perf-bin", required=True)
    parser.add_argument("--instance-lua", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=0)
    parser.add_argument("--conns", type=int, default=4)
    parser.add_argument("--pipeline", type=int, default=128)
    parser.add_argument("--client-smp", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tarantool-port", type=int, default=3311)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("tarn", "tarantool"))
    args = parser.parse_args()

    tarn, tarantool = Tarn(args), Tarantool(args)
    try:
        tarn_facts = tarantool_facts = None
        if args.only != "tarantool":
            tarn_facts = bench(args, tarn, lambda s: sum(line[1] for line in s.shard_lines()))
            tarn.stop()
        if args.only != "tarn":
            def tarantool_len(server):
                with Client(*server.address) as client:
                    return client.eval("return box.space.customers:len()")[0]
            tarantool_facts = bench(args, tarantool, tarantool_len)
            tarantool.stop()
        if tarn_facts and tarantool_facts:
            report(args, tarn, tarn_facts, tarantool_facts)
        else:
            print(tarn_facts or tarantool_facts)
        if tarantool_facts:
            print("Tarantool recovery log (seconds since process start):")
            for offset, line in tarantool.recovery_log_lines():
                print(f"  {offset:7.3f}  {line}")
    finally:
        tarn.stop()
        tarantool.stop()


if __name__ == "__main__":
    main()
