#!/usr/bin/env bash
# Compare tarn with Tarantool 2.6 under the same `perf-simple-query --connect` loads, on
# loopback, and print one table.
#
# Usage: scripts/compare-tarantool.sh
# Env:
#   DURATION     seconds per load (default 10)
#   PARTITIONS   keys populated in each server before measuring (default 1000000)
#   CLIENT_SMP   client executor threads (default: one per core, as perf-simple-query's own
#                --smp; never more than a load's connections; the same for both servers)
#   SHARDS       tarn --shards (default 0 = one per core)
#   WAL_MODE     none | write | fsync, for both servers (default write, both servers' own
#                default; README.md's tables say which mode each was measured in)
#   TARN_FLAGS   more tarn flags, e.g. "--idle-poll-us 0" (default none)
#   TARN_BIN     the tarn binary to measure (default: build and use target/release/tarn), e.g.
#                a copy of an earlier build, for before/after runs; PERF_BIN likewise for the
#                load generator (keep it the same for both, so only the server changes)
#   TARANTOOL_PORT  port of the reference Tarantool (default 3311)
#   TARANTOOL_NET_MSG_MAX  Tarantool's net_msg_max (default here 4096; Tarantool's own is
#                768, fewer than the 2,048 requests the 16 x 128 loads keep in flight: its
#                network thread then stops reading, and on this 2-core VM gets at 16 x 128
#                ran 10-15% slower than with 4096)
#   KEEP_DIR     keep the work dir (logs, JSON results) instead of deleting it
#   LOADS        which loads, space-separated (default "get replace select-range
#                select-secondary")
#   CUSTOMERS    customers rows populated in each server for select-secondary (default 200000)
#   SHAPES       which conns x in flight shapes, space-separated (default "1x1 16x128")
#   ROUNDS       runs of each load and shape per server, alternating tarn and Tarantool
#                (default 1); the table gives the median tps and p99 of each server's runs
#                and the median of the per-round ratios, which holds when the host's speed
#                drifts between rounds (these shared machines drift by tens of percent)
#
# Loads: get, replace, select-range (SELECT GE on kv's primary key, limit 10: on several
# shards a fan-out to every shard, merged) and select-secondary (SELECT GE limit 10 on
# customers' 5-part non-unique index, from a row's [a, b]: a fan-out too), each as
# 1 connection x 1 in flight and 16 connections x 128 in flight. The tps in the table is the median of the per-second samples; p99 is the
# client-observed latency. Both servers run with the same WAL_MODE, given to each explicitly
# (tarn --wal-mode, TARANTOOL_WAL_MODE), and the table's header says which. Client and servers
# share this machine's cores: read the numbers as a comparison, not as either server's
# ceiling.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
duration=${DURATION:-10}
partitions=${PARTITIONS:-1000000}
customers=${CUSTOMERS:-200000}
client_smp=${CLIENT_SMP:-$(nproc)}
shards=${SHARDS:-0}
wal_mode=${WAL_MODE:-write}
case $wal_mode in
    none | write | fsync) ;;
    *) echo "WAL_MODE must be none, write or fsync, not '$wal_mode'" >&2; exit 2 ;;
esac
read -r -a tarn_flags <<<"${TARN_FLAGS:-}"
tarantool_port=${TARANTOOL_PORT:-3311}
export TARANTOOL_NET_MSG_MAX=${TARANTOOL_NET_MSG_MAX:-4096}

if ! command -v tarantool >/dev/null; then
    echo "tarantool is not on PATH; install it with: apt-get install -y tarantool" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 1; }

if [[ -z ${TARN_BIN:-} ]]; then
    echo "building tarn and perf-simple-query (release)..." >&2
    (cd "$root" && cargo build --release --quiet --bin tarn --bin perf-simple-query)
fi
tarn_bin=${TARN_BIN:-$root/target/release/tarn}
perf_bin=${PERF_BIN:-$root/target/release/perf-simple-query}

work=$(mktemp -d "${TMPDIR:-/tmp}/compare-tarantool.XXXXXX")
tarantool_dir=""
tarn_pid=""
# shellcheck source=lib/servers.sh
source "$here/lib/servers.sh"
cleanup() {
    stop_servers
    if [[ -n ${KEEP_DIR:-} ]]; then
        echo "kept $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

echo "starting Tarantool on 127.0.0.1:$tarantool_port (wal_mode $wal_mode)..." >&2
tarantool_dir=$(TARANTOOL_WAL_MODE=$wal_mode "$here/tarantool/start.sh" "$tarantool_port" "$work/tarantool")
tarantool_addr=127.0.0.1:$tarantool_port

echo "starting tarn (--shards $shards --wal-mode $wal_mode ${TARN_FLAGS:-})..." >&2
start_tarn --shards "$shards" --wal-mode "$wal_mode" ${tarn_flags[@]+"${tarn_flags[@]}"}

read -r -a load_names <<<"${LOADS:-get replace select-range select-secondary}"

# Populate once per server: 16 connections, 128 replaces in flight each; customers only
# when a load reads them, with the seed the loads draw with (the rows depend on it).
for server in tarn tarantool; do
    addr_var=${server}_addr
    echo "populating $partitions keys in $server (${!addr_var})..." >&2
    "$perf_bin" --connect "${!addr_var}" --smp 1 --conns 16 --pipeline 1 \
        --partitions "$partitions" --operations-per-shard 1 >"$work/populate-$server.log"
    if [[ " ${load_names[*]} " == *" select-secondary "* ]]; then
        echo "populating $customers customers rows in $server..." >&2
        "$perf_bin" --connect "${!addr_var}" --smp 1 --conns 16 --pipeline 1 \
            --partitions "$customers" --operations-per-shard 1 --random-seed 42 \
            --op select-secondary >"$work/populate-customers-$server.log"
    fi
done
read -r -a shapes <<<"${SHAPES:-1x1 16x128}"
rounds=${ROUNDS:-1}
for name in "${load_names[@]}"; do
    case $name in
        get | replace | select-range | select-secondary) flag="--op $name --limit 10" ;;
        *) echo "unknown load '$name' in LOADS (get, replace, select-range, select-secondary)" >&2; exit 2 ;;
    esac
    rows=$partitions
    [[ $name == select-secondary ]] && rows=$customers
    for shape in "${shapes[@]}"; do
        conns=${shape%x*}
        pipeline=${shape#*x}
        # One thread driving 16 x 128 in flight is itself the bottleneck of a closed loop:
        # every reply waits for it to come round (measured, 2 cores: tarn's servers spent
        # 15% more CPU per request idling for it; Tarantool, whose one transaction thread
        # is saturated either way, was unchanged).
        smp=$((conns < client_smp ? conns : client_smp))
        for ((round = 1; round <= rounds; round++)); do
            for server in tarn tarantool; do
                addr_var=${server}_addr
                echo "$name $shape on $server for ${duration}s (round $round of $rounds)..." >&2
                # shellcheck disable=SC2086 # $flag is four words
                "$perf_bin" --connect "${!addr_var}" --smp "$smp" --conns "$conns" \
                    --pipeline "$pipeline" --partitions "$rows" --no-populate \
                    --duration "$duration" --random-seed 42 $flag \
                    --json-result "$work/$name-$shape-$server-$round.json" \
                    >"$work/$name-$shape-$server-$round.log"
            done
        done
    done
done

echo
echo "wal_mode $wal_mode on both servers; tarn ($tarn_addr, --shards $shards${TARN_FLAGS:+ $TARN_FLAGS}) vs Tarantool $(tarantool --version | head -n 1 | cut -d' ' -f2) ($tarantool_addr, net_msg_max $TARANTOOL_NET_MSG_MAX);" \
    "$partitions keys ($customers customers rows), ${duration}s per load, client --smp $client_smp (at most one per connection), $(nproc) cores shared"
python3 - "$work" "$rounds" "${shapes[*]}" "${load_names[@]}" <<'PY'
import json, sys, os, statistics
work, rounds, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
rows = []
for name in sys.argv[4:]:
    for shape in shapes:
        runs = {"tarn": [], "tarantool": []}
        for round_ in range(1, rounds + 1):
            for server in runs:
                with open(os.path.join(work, f"{name}-{shape}-{server}-{round_}.json")) as f:
                    doc = json.load(f)
                runs[server].append(((doc["summary"]["tps"] or {}).get("median"),
                                     (doc["latency_ns"] or {}).get("p99"), doc["errors"]))
        ratios = [t[0] / r[0] for t, r in zip(runs["tarn"], runs["tarantool"]) if t[0] and r[0]]
        summary = {server: (median(r[0] for r in rs), median(r[1] for r in rs), sum(r[2] for r in rs))
                   for server, rs in runs.items()}
        rows.append((name, shape, summary, median(ratios), ratios))
def fmt_tps(x):
    return "n/a" if x is None else f"{x:,.0f}"
def fmt_us(ns):
    return "n/a" if ns is None else f"{ns / 1000:,.1f}"
header = ("operation", "conns x in flight", "tarn tps", "Tarantool tps", "ratio", "tarn p99 us", "Tarantool p99 us", "errors")
table = [header]
for name, shape, r, ratio, ratios in rows:
    (t_tps, t_p99, t_err), (r_tps, r_p99, r_err) = r["tarn"], r["tarantool"]
    shown = "n/a" if ratio is None else f"{ratio:.2f}x"
    table.append((name, shape.replace("x", " x "), fmt_tps(t_tps), fmt_tps(r_tps), shown,
                  fmt_us(t_p99), fmt_us(r_p99), f"{t_err}/{r_err}"))
widths = [max(len(row[i]) for row in table) for i in range(len(header))]
for i, row in enumerate(table):
    print("| " + " | ".join(cell.ljust(w) if j < 2 else cell.rjust(w) for j, (cell, w) in enumerate(zip(row, widths))) + " |")
    if i == 0:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
print()
if rounds > 1:
    for name, shape, _, _, ratios in rows:
        print(f"{name} {shape}: ratio per round " + ", ".join(f"{x:.2f}" for x in ratios))
    print()
print(f"tps: median of the per-second samples (with ROUNDS={rounds}: the median of the rounds' medians); "
      "ratio: tarn / Tarantool, the median of the per-round ratios; errors: tarn/Tarantool error replies, all rounds")
PY
