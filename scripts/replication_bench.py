#!/usr/bin/env python3
"""A master's replace throughput with an asynchronous replica attached and without, and how
far behind the replica stays under that load.

Run through scripts/replication-bench.sh, which builds the binaries and passes the paths.

1. Start a master (wal_mode write), load KEYS kv rows into it, `box.snapshot()`.
2. Start a replica (`--replication`, `--read-only`) and wait until it has copied the master.
3. ROUNDS times, alternating: replaces at CONNS x PIPELINE for SECONDS with the replica
   following, then with the replica stopped (SIGSTOP: nothing else changes on the
   machine); the throughput of each (perf-simple-query's median per-second rate), and the
   CPU time the master's relay threads took (what streaming costs the master itself: on one
   machine the replica's own work of applying and logging every row takes the master's and
   the client's cores too).
4. During the runs with the replica: every 50 ms both servers' `box.info.signature` (the
   rows their shards have written / applied). The replica's lag at a sample is how long
   before it the master's signature first reached the replica's: the age of the newest row
   the replica has. Its p50, p99 and max; and the rows behind at the end of the run and how
   long the replica took to catch up after it.
5. Afterwards, kv read from both a page at a time in key order: the same rows, byte for
   byte (a checksum of the tuples the script computes itself).

Client, master and replica share this machine's cores: read the ratio, not the absolute
rates.
"""

import argparse
import bisect
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iproto import Client, pack  # noqa: E402

KV_SPACE_ID = 512
ITERATOR_GE, ITERATOR_GT = 2, 6
PAGE = 20_000

LISTENING = re.compile(r"listening on (\S+)")


def log(message):
    print(message, file=sys.stderr, flush=True)


class Server:
    def __init__(self, args, name, extra):
        self.name = name
        self.log_path = os.path.join(args.work, f"{name}.log")
        command = [args.tarn_bin, "--config", args.tarn_config, "--listen", "127.0.0.1:0",
                   "--shards", str(args.shards), "--wal-mode", "write",
                   "--data-dir", os.path.join(args.work, f"{name}-data")] + extra
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="info")
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                            stderr=log_file, env=env)
        deadline = time.monotonic() + 60
        while True:
            with open(self.log_path, errors="replace") as log_file:
                match = LISTENING.search(log_file.read())
            if match:
                host, port = match.group(1).rsplit(":", 1)
                self.address = (host, int(port))
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start; see {self.log_path}")
            time.sleep(0.05)

    def info(self):
        with Client(*self.address) as client:
            return client.call("box.info")[0]

    def log_text(self):
        with open(self.log_path, errors="replace") as log_file:
            return log_file.read()

    def stop(self):
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        self.process.wait(timeout=30)


def replaces(args, master, seconds, name, populate=False):
    result = os.path.join(args.work, f"{name}.json")
    host, port = master.address
    command = [args.perf_bin, "--connect", f"{host}:{port}", "--op", "replace",
               "--conns", str(args.conns), "--pipeline", str(args.pipeline),
               "--smp", str(args.client_smp), "--partitions", str(args.keys),
               "--json-result", result]
    command += ["--operations-per-shard", "1"] if populate else [
        "--duration", str(seconds), "--no-populate"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(result) as f:
        return json.load(f)


def wait_caught_up(master, replica, timeout):
    """Seconds until the replica's signature reaches the master's (as it is now)."""
    started = time.monotonic()
    target = master.info()["signature"]
    while replica.info()["signature"] < target:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the replica did not catch up in {timeout} s")
        time.sleep(0.01)
    return time.monotonic() - started


def sample_lag(master, replica, stop, samples):
    """Appends (time, master signature, replica signature) every 50 ms until `stop`."""
    with Client(*master.address) as m, Client(*replica.address) as r:
        while not stop.is_set():
            at = time.monotonic()
            samples.append((at, m.call("box.info")[0]["signature"],
                            r.call("box.info")[0]["signature"]))
            time.sleep(0.05)


def lags(samples):
    """Per sample, how long before it the master first had the replica's signature."""
    times = [at for at, _, _ in samples]
    masters = [signature for _, signature, _ in samples]
    out = []
    for at, _, replica in samples:
        first = bisect.bisect_left(masters, replica)
        out.append(max(0.0, at - times[min(first, len(times) - 1)]) if first < len(times) else 0.0)
    return out


def relay_cpu_seconds(master):
    """CPU seconds the master's relay threads have used so far (utime + stime)."""
    total = 0
    task_dir = f"/proc/{master.process.pid}/task"
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/comm") as comm:
                if not comm.read().startswith("relay"):
                    continue
            with open(f"{task_dir}/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def kv_checksum(server):
    """(rows, sha256) of every kv tuple in primary key order, read a page at a time."""
    digest, rows, key, iterator = hashlib.sha256(), 0, [], ITERATOR_GE
    with Client(*server.address) as client:
        while True:
            page = client.select(KV_SPACE_ID, 0, key, limit=PAGE, iterator=iterator)
            for tuple_ in page:
                digest.update(pack(tuple_))
            rows += len(page)
            if len(page) < PAGE:
                return rows, digest.hexdigest()
            key, iterator = [page[-1][0]], ITERATOR_GT


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--tarn-bin", "--tarn-config", "--perf-bin", "--work"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--pipeline", type=int, default=128)
    parser.add_argument("--client-smp", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    master = Server(args, "master", [])
    log(f"master at {master.address}; loading {args.keys} kv rows")
    replaces(args, master, 0, "populate", populate=True)
    # The copy then streams a snapshot, as a replica of a long-running master copies one.
    with Client(*master.address) as client:
        client.call("box.snapshot")
    replica = Server(args, "replica", ["--replication", "%s:%d" % master.address, "--read-only"])
    copy_seconds = wait_caught_up(master, replica, 600)
    log(f"replica copied the master in {copy_seconds:.2f} s")
    with_replica, without, all_lags, behind, catch_up = [], [], [], [], []
    relay_share = []
    try:
        for round_no in range(args.rounds):
            samples, stop = [], threading.Event()
            sampler = threading.Thread(target=sample_lag, args=(master, replica, stop, samples))
            sampler.start()
            cpu_before, started = relay_cpu_seconds(master), time.monotonic()
            result = replaces(args, master, args.seconds, f"with-{round_no}")
            relay_share.append((relay_cpu_seconds(master) - cpu_before)
                               / (time.monotonic() - started))
            stop.set()
            sampler.join()
            with_replica.append(result["summary"]["tps"]["median"])
            all_lags += lags(samples)
            behind.append(master.info()["signature"] - replica.info()["signature"])
            catch_up.append(wait_caught_up(master, replica, 600))
            replica.process.send_signal(signal.SIGSTOP)
            result = replaces(args, master, args.seconds, f"without-{round_no}")
            replica.process.send_signal(signal.SIGCONT)
            without.append(result["summary"]["tps"]["median"])
            wait_caught_up(master, replica, 600)
            log(f"round {round_no + 1}: with a replica {with_replica[-1]:,.0f}/s, without "
                f"{without[-1]:,.0f}/s; {behind[-1]} rows behind at the end, caught up in "
                f"{catch_up[-1]:.2f} s")
        master_sum, replica_sum = kv_checksum(master), kv_checksum(replica)
        if master_sum != replica_sum:
            raise RuntimeError(f"kv differs: master {master_sum}, replica {replica_sum}")
        ratios = [w / o for w, o in zip(with_replica, without)]
        ms = 1000
        print(f"| master {args.shards} shards, replica {args.shards} shards, replaces at "
              f"{args.conns} x {args.pipeline}, wal write, {args.keys} keys | value |")
        print("| --- | ---: |")
        print(f"| replaces, replica attached (median of {args.rounds}) | "
              f"{statistics.median(with_replica):,.0f}/s |")
        print(f"| replaces, replica stopped | {statistics.median(without):,.0f}/s |")
        print(f"| with / without (median of per-round ratios) | {statistics.median(ratios):.2f}x "
              f"({', '.join(f'{r:.2f}' for r in ratios)}) |")
        print(f"| the master's relay threads, CPU during the load (median) | "
              f"{statistics.median(relay_share) * 100:.0f}% of a core |")
        print(f"| replica lag during the load, p50 / p99 / max ({len(all_lags)} samples) | "
              f"{percentile(all_lags, 0.5) * ms:.0f} / {percentile(all_lags, 0.99) * ms:.0f} / "
              f"{max(all_lags) * ms:.0f} ms |")
        print(f"| rows behind when the load stopped; catch-up | "
              f"{', '.join(map(str, behind))}; {', '.join(f'{c:.2f} s' for c in catch_up)} |")
        print(f"| copy of {args.keys} rows (bootstrap) | {copy_seconds:.2f} s |")
        print(f"| kv on master and replica afterwards: rows, sha256 of the tuples in key order | "
              f"{master_sum[0]:,} rows, identical ({master_sum[1][:16]}...) |")
    finally:
        replica.stop()
        master.stop()


if __name__ == "__main__":
    main()
