#!/usr/bin/env python3
"""An index built while serving: `create_index` of a 5-part non-unique TREE index on ROWS
`customers` rows while perf-simple-query runs gets at CONNS x PIPELINE.

Run through scripts/ddl-build-bench.sh, which builds the binaries and passes the paths.

1. Start tarn empty (WAL mode `write`), load ROWS customers rows, `box.snapshot`, restart
   REPEATS times: the slowest shard's recovery time with the shipped indexes (median).
2. Gets alone for GET_SECONDS: the throughput and p99 without a build.
3. Gets for a long run; one second in, `create_index('by_dcba', {parts = {'d', 'c', 'b',
   'a', 'name'}})` over CALL, timed to its reply. The per-second throughput of the seconds
   the build covers.
4. The index dropped (instant: nothing to build), then gets for a run about as long as the
   build took in 3, the same create_index started a quarter second in: that run's p99 and
   max latency are those of requests served almost all during the build.
5. `box.snapshot`, restart REPEATS times: the slowest shard's recovery with the new index;
   the difference from 1 is recovery's bulk build of it (sort and fill, every shard at once).

Gets are on `kv` (perf-simple-query's point reads), served by the same cores that build:
what a build costs a core's requests does not depend on which space they read.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iproto import Client  # noqa: E402
from recovery_bench import Tarn, load, log, snapshot  # noqa: E402

INDEX_NAME = "by_dcba"
INDEX_OPTIONS = {"parts": ["d", "c", "b", "a", "name"], "unique": False}
KV_KEYS = 100_000


def recovery_seconds(tarn, repeats):
    """Median over `repeats` restarts of the slowest shard's recovery; leaves tarn running."""
    times = []
    for _ in range(repeats):
        tarn.stop()
        tarn.start(recovering=True)
        times.append(max(elapsed_ms for *_, elapsed_ms in tarn.shard_lines()) / 1000)
    return statistics.median(times)


def gets(args, tarn, seconds, name, populate=False):
    """Starts perf-simple-query gets for `seconds`; returns (process, json path)."""
    result = os.path.join(args.work, f"gets-{name}.json")
    host, port = tarn.address
    command = [args.perf_bin, "--connect", f"{host}:{port}", "--op", "get",
               "--conns", str(args.conns), "--pipeline", str(args.pipeline),
               "--smp", str(args.client_smp), "--partitions", str(KV_KEYS),
               "--duration", str(seconds), "--json-result", result]
    if not populate:
        command.append("--no-populate")
    log("  " + " ".join(command))
    return subprocess.Popen(command, stdout=subprocess.DEVNULL), result


def finished(process, result):
    if process.wait() != 0:
        raise RuntimeError(f"perf-simple-query failed ({process.returncode})")
    with open(result) as f:
        return json.load(f)


def create_index(tarn):
    """Seconds from the call to its reply."""
    with Client(*tarn.address, timeout_seconds=600) as client:
        started = time.monotonic()
        client.call("box.space.customers:create_index", [INDEX_NAME, INDEX_OPTIONS])
        return time.monotonic() - started


def drop_index(tarn):
    with Client(*tarn.address, timeout_seconds=600) as client:
        client.call(f"box.space.customers.index.{INDEX_NAME}:drop")


def build_under_gets(args, tarn, seconds, build_at, name):
    """Gets for `seconds`, the index created `build_at` seconds in; (build seconds, when
    the build started and ended in the gets' clock, the gets' JSON)."""
    process, result = gets(args, tarn, seconds, name)
    # perf-simple-query connects before it measures; its clock starts about then.
    gets_started = time.monotonic()
    time.sleep(build_at)
    build_started = time.monotonic() - gets_started
    build_seconds = create_index(tarn)
    return build_seconds, (build_started, build_started + build_seconds), finished(process,
                                                                                 result)


def tps_within(samples, window):
    start, end = window
    inside = [s["tps"] for s in samples
              if s["at_seconds"] - s["interval_seconds"] >= start - 0.5
              and s["at_seconds"] <= end + 0.5]
    return inside


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--tarn-bin", "--tarn-config", "--perf-bin", "--work"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--tarn-memory", default="")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--pipeline", type=int, default=128)
    parser.add_argument("--client-smp", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--get-seconds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    tarn = Tarn(args)
    log(f"tarn: starting empty, loading {args.rows} customers rows")
    tarn.start()
    load(args, tarn)
    snapshot(tarn)
    recovery_before = recovery_seconds(tarn, args.repeats)
    log(f"recovered in {recovery_before:.2f} s (slowest shard)")

    base = finished(*gets(args, tarn, args.get_seconds, "alone", populate=True))
    log(f"gets alone: {base['summary']['tps']['median']:.0f}/s")

    build_seconds, window, during = build_under_gets(args, tarn, 30, 1.0, "build")
    log(f"create_index under gets: {build_seconds:.2f} s")
    drop_index(tarn)
    seconds = max(1, math.floor(build_seconds))
    tail_build_seconds, _, tail = build_under_gets(args, tarn, seconds, 0.25, "build-tail")
    log(f"create_index again: {tail_build_seconds:.2f} s, gets for {seconds} s of it")

    snapshot(tarn)
    recovery_after = recovery_seconds(tarn, args.repeats)
    tarn.stop()
    bulk_build = recovery_after - recovery_before

    inside = tps_within(during["samples"], window)
    base_tps = base["summary"]["tps"]["median"]
    build_tps = statistics.median(inside) if inside else float("nan")
    ms = 1e-6
    print(f"| {args.rows} customers rows, {args.shards} shards, gets at "
          f"{args.conns} x {args.pipeline} | value |")
    print("| --- | ---: |")
    print(f"| create_index under gets | {build_seconds:.2f} s |")
    print(f"| recovery's bulk build of that index (recovery {recovery_after:.2f} s "
          f"- {recovery_before:.2f} s) | {bulk_build:.2f} s |")
    print(f"| build / bulk build | {build_seconds / bulk_build:.2f}x |")
    print(f"| gets alone | {base_tps:,.0f}/s, p99 {base['latency_ns']['p99'] * ms:.2f} ms, "
          f"max {base['latency_ns']['max'] * ms:.2f} ms |")
    print(f"| gets during the build (median of {len(inside)} seconds) | {build_tps:,.0f}/s "
          f"({build_tps / base_tps:.2f}x) |")
    print(f"| gets of a {seconds} s run inside the second build "
          f"({tail_build_seconds:.2f} s) | p99 {tail['latency_ns']['p99'] * ms:.2f} ms, "
          f"max {tail['latency_ns']['max'] * ms:.2f} ms |")


if __name__ == "__main__":
    main()
