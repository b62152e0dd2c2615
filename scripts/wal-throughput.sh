#!/usr/bin/env bash
# REPLACE throughput of tarn per WAL mode (none, write, fsync) and number of concurrent
# writers, printed as one table; fsync at many writers vs write shows group commit.
#
# Usage: scripts/wal-throughput.sh
# Env:
#   DURATION     seconds per load (default 10)
#   WRITERS      writer counts (default "1 16 128")
#   MODES        WAL modes (default "none write fsync")
#   SHAPE        conns (default): W writers = W connections x 1 request in flight each,
#                  so every writer waits for its reply (the closest to W clients);
#                pipeline: W writers = 1 connection x W requests in flight; this shows
#                  whether requests pipelined on one connection share a commit too.
#   PARTITIONS   keys 0..N populated before measuring and drawn from (default 100000)
#   CLIENT_SMP   client executor threads (default 1)
#   SHARDS       tarn --shards (default 0 = one per core)
#   KEEP_DIR     keep the work dir (logs, JSON results, data) instead of deleting it
#   TMPDIR       where the work dir and so the WAL files go (default /tmp): fsync cost is
#                that file system's
#
# Each mode gets a fresh tarn on a fresh data dir, populated once (16 connections x 128 in
# flight), then one `perf-simple-query --connect --write` run per writer count. The tps is
# the median of the per-second samples. Client and server share this machine's cores.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
duration=${DURATION:-10}
writers_list=${WRITERS:-"1 16 128"}
modes=${MODES:-"none write fsync"}
shape=${SHAPE:-conns}
partitions=${PARTITIONS:-100000}
client_smp=${CLIENT_SMP:-1}
shards=${SHARDS:-0}
case $shape in
    conns | pipeline) ;;
    *) echo "SHAPE must be conns or pipeline, not $shape" >&2; exit 2 ;;
esac
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 1; }

echo "building tarn and perf-simple-query (release)..." >&2
(cd "$root" && cargo build --release --quiet --bin tarn --bin perf-simple-query)
tarn_bin=$root/target/release/tarn
perf_bin=$root/target/release/perf-simple-query

work=$(mktemp -d "${TMPDIR:-/tmp}/wal-throughput.XXXXXX")
tarn_pid=""
stop_tarn() {
    if [[ -n $tarn_pid ]] && kill -0 "$tarn_pid" 2>/dev/null; then
        kill -TERM "$tarn_pid" 2>/dev/null || true
        wait "$tarn_pid" 2>/dev/null || true
    fi
    tarn_pid=""
}
cleanup() {
    stop_tarn
    if [[ -n ${KEEP_DIR:-} ]]; then
        echo "kept $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

start_tarn() {
    local mode=$1
    NO_COLOR=1 RUST_LOG=info "$tarn_bin" --config "$root/conf/tarn.toml" --listen 127.0.0.1:0 \
        --shards "$shards" --data-dir "$work/data-$mode" --wal-mode "$mode" \
        >"$work/tarn-$mode.out" 2>"$work/tarn-$mode.log" &
    tarn_pid=$!
    tarn_addr=""
    for _ in $(seq 1 300); do
        tarn_addr=$(grep -o 'listening on [0-9.:]*' "$work/tarn-$mode.log" | head -n 1 | cut -d' ' -f3 || true)
        [[ -n $tarn_addr ]] && return 0
        kill -0 "$tarn_pid" 2>/dev/null || { echo "tarn exited early:" >&2; tail -n 20 "$work/tarn-$mode.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "tarn did not report its address" >&2
    exit 1
}

for mode in $modes; do
    echo "tarn --wal-mode $mode: starting, populating $partitions keys..." >&2
    start_tarn "$mode"
    "$perf_bin" --connect "$tarn_addr" --smp 1 --conns 16 --pipeline 1 \
        --partitions "$partitions" --operations-per-shard 1 >"$work/populate-$mode.log"
    for writers in $writers_list; do
        if [[ $shape == conns ]]; then conns=$writers pipeline=1; else conns=1 pipeline=$writers; fi
        smp=$((client_smp < conns ? client_smp : conns))
        echo "  $writers writers ($conns conns x $pipeline in flight) for ${duration}s..." >&2
        cmd=("$perf_bin" --connect "$tarn_addr" --smp "$smp" --conns "$conns"
            --pipeline "$pipeline" --partitions "$partitions" --no-populate --write
            --duration "$duration" --random-seed 42
            --json-result "$work/$mode-$writers.json")
        echo "    ${cmd[*]}" >&2
        "${cmd[@]}" >"$work/$mode-$writers.log"
    done
    stop_tarn
    if grep -E ' (ERROR|WARN) ' "$work/tarn-$mode.log" >&2; then
        echo "tarn --wal-mode $mode logged the errors/warnings above" >&2
    fi
done

echo
echo "tarn REPLACE throughput per WAL mode; $shape shape ($(
    [[ $shape == conns ]] && echo "W writers = W connections x 1 in flight" \
        || echo "W writers = 1 connection x W in flight")); ${duration}s per load," \
    "$partitions keys, --shards $shards, client --smp $client_smp, $(nproc) cores shared," \
    "data in $(df --output=source,fstype "$work" | tail -n 1 | tr -s ' ')"
python3 - "$work" "$modes" "$writers_list" <<'PY'
import json, os, sys
work, modes, writers_list = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
results = {}
for mode in modes:
    for writers in writers_list:
        with open(os.path.join(work, f"{mode}-{writers}.json")) as f:
            doc = json.load(f)
        tps = (doc["summary"]["tps"] or {}).get("median")
        p99 = (doc["latency_ns"] or {}).get("p99")
        results[mode, writers] = (tps, p99, doc["errors"])
def fmt_tps(x):
    return "n/a" if x is None else f"{x:,.0f}"
def fmt_us(ns):
    return "n/a" if ns is None else f"{ns / 1000:,.0f}"
header = ["writers"] + [f"{m} tps" for m in modes] + [f"{m} p99 us" for m in modes] + ["errors"]
table = [header]
for writers in writers_list:
    row = [writers]
    row += [fmt_tps(results[m, writers][0]) for m in modes]
    row += [fmt_us(results[m, writers][1]) for m in modes]
    row.append("/".join(str(results[m, writers][2]) for m in modes))
    table.append(row)
widths = [max(len(r[i]) for r in table) for i in range(len(header))]
for i, row in enumerate(table):
    print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
    if i == 0:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
print()
print("tps: median of the per-second samples; p99: client-observed latency; errors: error "
      "replies per mode (" + "/".join(modes) + ")")
top = writers_list[-1]
if "fsync" in modes and "write" in modes:
    f, w = results["fsync", top][0], results["write", top][0]
    if f and w:
        ratio = w / f
        verdict = "MET" if ratio <= 3 else "NOT MET"
        print(f"fsync / write at {top} writers: {f / w:.2f} (write is {ratio:.2f}x fsync); "
              f"goal fsync within 3x of write: {verdict}")
    f1 = results["fsync", writers_list[0]][0]
    if f and f1:
        print(f"fsync: {top} writers / {writers_list[0]} writer = {f / f1:.1f}x "
              "(> 1 means replies share fsyncs: group commit)")
PY
