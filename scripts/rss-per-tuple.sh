#!/usr/bin/env bash
# Memory per stored tuple, from outside: the growth of each server's RSS (VmRSS in
# /proc/PID/status) while 1,000,000 kv tuples `[id, bucket_id, 100-byte string]` are loaded
# into it over IPROTO, for tarn and for Tarantool 2.6 with the same space (memtx, TREE
# primary index on unsigned id; scripts/tarantool/instance.lua), and the ratio.
#
# Usage: scripts/rss-per-tuple.sh
# Env:
#   TUPLES      tuples to load (default 1000000)
#   SHARDS      tarn --shards (default 0 = one per core)
#   TARN_BIN    the tarn binary (default: build and use target/release/tarn)
#   ORDER       ascending (default) or random: the order the ids are loaded in
#   BATCH       requests per pipelined batch (default 500)
#   TARANTOOL_PORT  port of the reference Tarantool (default 3312)
#   SKIP_TARANTOOL  set to measure tarn alone
#
# Both servers run with wal_mode none (nothing but memory is measured) and get the same load:
# scripts/load_kv.py, one connection, REPLACEs of ids 1..TUPLES in batches of BATCH in
# flight, each tuple 111 bytes of MessagePack (5 + 3 + 102 for id, bucket_id and value). RSS
# is read 1 s after start-up, before the connection, and 1 s after the last reply; so it
# counts everything the load left behind: tuples, index nodes, allocator headers and slack,
# and the connection's buffers (a few hundred KiB, 0.1-0.3 bytes per tuple).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
tuples=${TUPLES:-1000000}
shards=${SHARDS:-0}
tarantool_port=${TARANTOOL_PORT:-3312}

order=${ORDER:-ascending}
batch=${BATCH:-500}
python=python3
[[ -x $root/.venv/bin/python ]] && python=$root/.venv/bin/python

if [[ -z ${TARN_BIN:-} ]]; then
    echo "building tarn (release)..." >&2
    (cd "$root" && cargo build --release --quiet --bin tarn)
fi
tarn_bin=${TARN_BIN:-$root/target/release/tarn}

work=$(mktemp -d "${TMPDIR:-/tmp}/rss-per-tuple.XXXXXX")
tarn_pid=""
tarantool_dir=""
# shellcheck source=lib/servers.sh
source "$here/lib/servers.sh"
cleanup() {
    stop_servers
    rm -rf "$work"
}
trap cleanup EXIT

rss_kib() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# load NAME ADDR PID: prints "NAME RSS_BEFORE_KIB RSS_AFTER_KIB".
load() {
    local name=$1 addr=$2 pid=$3 before after
    sleep 1
    before=$(rss_kib "$pid")
    echo "loading $tuples kv tuples into $name ($addr, $order)..." >&2
    "$python" "$here/load_kv.py" "${addr%:*}" "${addr##*:}" "$tuples" 100 "$batch" "$order"
    sleep 1
    after=$(rss_kib "$pid")
    echo "$name $before $after"
}

results=()

echo "starting tarn (--shards $shards --wal-mode none)..." >&2
start_tarn --shards "$shards" --wal-mode none
# tarn restarts itself once to set up its heap (see README, Limits): the pid that listens is
# the one started, since the restart is an exec.
results+=("$(load tarn "$tarn_addr" "$tarn_pid")")
kill -TERM "$tarn_pid" && wait "$tarn_pid" 2>/dev/null || true
tarn_pid=""

if [[ -z ${SKIP_TARANTOOL:-} ]]; then
    command -v tarantool >/dev/null || { echo "tarantool is not on PATH" >&2; exit 1; }
    echo "starting Tarantool on 127.0.0.1:$tarantool_port (wal_mode none)..." >&2
    tarantool_dir=$(TARANTOOL_WAL_MODE=none "$here/tarantool/start.sh" "$tarantool_port" "$work/tarantool")
    results+=("$(load tarantool "127.0.0.1:$tarantool_port" "$(cat "$tarantool_dir/tarantool.pid")")")
fi

echo
echo "RSS growth while loading $tuples kv tuples [id, bucket_id, string(100)], wal_mode none," \
    "ids $order (tarn --shards $shards; Tarantool $(tarantool --version 2>/dev/null | head -n 1 | cut -d' ' -f2))"
printf '%s\n' "${results[@]}" | awk -v n="$tuples" '
    { per[$1] = ($3 - $2) * 1024 / n
      printf "%-10s RSS %8.1f -> %8.1f MiB, %6.1f bytes/tuple\n", $1, $2 / 1024, $3 / 1024, per[$1] }
    END { if (("tarn" in per) && ("tarantool" in per))
              printf "ratio tarn / Tarantool: %.2fx (goal: at most 0.85x)\n", per["tarn"] / per["tarantool"] }'
