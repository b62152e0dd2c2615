#!/usr/bin/env bash
# Instructions per operation, counted by callgrind (exact, needs no hardware counters):
# runs `perf-simple-query --smp 1 --operations-per-shard N` (in-process: tarn's shard, its
# request path and the load generator in one process) at two values of N under
# `valgrind --tool=callgrind` and prints, for get, replace and update,
#     insns/op: (Ir(N2) - Ir(N1)) / (N2 - N1)
# Start-up, population and shutdown are the same in both runs and cancel out. The load
# generator's own share per operation (drawing a key, handing over a pre-encoded packet,
# checking the reply) is about 100 instructions; the rest is tarn's request path.
#
# With TOP=K it also prints, per operation, the K functions whose own (exclusive)
# instructions grew most between the two runs: where the instructions go.
#
# With CONNECT=HOST:PORT it measures the --connect client instead (a server must be running
# there); that counts only the load generator's instructions.
#
# Usage: scripts/insns-per-op.sh
# Env: N1 (default 2000), N2 (default 12000), PARTITIONS (default 10000), CONCURRENCY
#      (default 100), TOP (see above), CONNECT (see above), KEEP_DIR (keep callgrind outputs),
#      REPEAT (default 1: runs per N, the fewest instructions counted; see below),
#      LOADS (default "get replace update"; also select-range and select-secondary, SELECT GE
#      limit 10 on kv's primary key and on customers' 5-part index, which on the one shard
#      here scan without a fan-out: with two shards callgrind would count their idle polling,
#      which runs serialized under it, as work)
#
# Noise: waiting is kept out of the count (a shard blocks until measuring starts instead of
# polling a timer), so repeated runs agree within a few thousand instructions: < 1 insn/op
# with the defaults (10 runs of replace at N2 on 4f32fba: within 12,000 instructions). An
# earlier build's replace sometimes counted ~2.4M more at N2 (the engine's teardown frees:
# _int_free, malloc_consolidate); if a build does that again, REPEAT=3 keeps the fewest of
# three runs per N, as anything else running can only add instructions. The sampler thread still wakes every 10 ms; under callgrind a run of
# 12000 operations lasts well under a second, so that is a few insns/op at most.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
n1=${N1:-2000}
n2=${N2:-12000}
partitions=${PARTITIONS:-10000}
concurrency=${CONCURRENCY:-100}
connect=${CONNECT:-}
top=${TOP:-0}
repeat=${REPEAT:-1}

if (( n2 <= n1 )); then
    echo "N2 ($n2) must be larger than N1 ($n1)" >&2
    exit 2
fi
if ! command -v valgrind >/dev/null; then
    echo "valgrind is not on PATH; install it with: apt-get install -y valgrind" >&2
    exit 1
fi

(cd "$root" && cargo build --release --quiet --bin perf-simple-query)
bin=$root/target/release/perf-simple-query

loads=${LOADS:-get replace update}
mode_args=(--smp 1 --partitions "$partitions" --random-seed 1)
if [[ -n $connect ]]; then
    mode_args+=(--connect "$connect" --conns 1 --pipeline "$concurrency")
    echo "note: CONNECT=$connect counts the client's instructions only, not the server's" >&2
else
    mode_args+=(--concurrency "$concurrency")
fi

# Fail early and clearly when the mode cannot run at all.
if ! probe=$("$bin" "${mode_args[@]}" --operations-per-shard 1 2>&1); then
    echo "perf-simple-query cannot run in this mode yet:" >&2
    echo "$probe" | tail -n 3 >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/insns-per-op.XXXXXX")
if [[ -z ${KEEP_DIR:-} ]]; then
    trap 'rm -rf "$work"' EXIT
else
    echo "callgrind outputs in $work" >&2
fi

# Total instructions (Ir) of one run under callgrind.
instructions() {
    local out=$1
    shift
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$@" >"$out.log" 2>&1 || {
        echo "run failed: $bin $*" >&2
        tail -n 20 "$out.log" >&2
        return 1
    }
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

# The fewest instructions of $repeat runs; the output of the last run is kept at $1.
fewest() {
    local out=$1 best="" ir
    shift
    for ((run = 1; run <= repeat; run++)); do
        ir=$(instructions "$out" "$@") || return 1
        if [[ -z $best ]] || (( ir < best )); then
            best=$ir
        fi
    done
    echo "$best"
}

# Exclusive instructions per function of one callgrind output: "count<TAB>function".
by_function() {
    callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null | awk '
        /^ *[0-9][0-9,]* +\([ 0-9.]+%\) +[^ ]/ && !/PROGRAM TOTALS/ {
            count = $1; gsub(",", "", count)
            name = $0; sub(/^ *[0-9,]+ +\([ 0-9.]+%\) +/, "", name)
            sub(/ \[[^]]*\]$/, "", name); sub(/^[^:]*:/, "", name)
            total[name] += count
        }
        END { for (name in total) printf "%d\t%s\n", total[name], name }'
}

# The `top` functions whose exclusive instructions grew most from run 1 to run 2, per op.
top_functions() {
    local first=$1 second=$2 ops=$3
    awk -F '\t' -v ops="$ops" '
        NR == FNR { before[$2] = $1; next }
        { printf "%10.1f  %s\n", ($1 - before[$2]) / ops, $2 }' \
        <(by_function "$first") <(by_function "$second") | sort -rn | awk -v top="$top" 'NR <= top'
}

for name in $loads; do
    case $name in
        get | replace | update | select-range | select-secondary) flags=(--op "$name") ;;
        *) echo "unknown load '$name' in LOADS" >&2; exit 2 ;;
    esac
    ir1=$(fewest "$work/$name-$n1.out" "${mode_args[@]}" --operations-per-shard "$n1" "${flags[@]}")
    ir2=$(fewest "$work/$name-$n2.out" "${mode_args[@]}" --operations-per-shard "$n2" "${flags[@]}")
    per_op=$(( (ir2 - ir1) / (n2 - n1) ))
    echo "$name insns/op: $per_op   (Ir $ir1 at N=$n1, $ir2 at N=$n2)"
    if (( top > 0 )); then
        top_functions "$work/$name-$n1.out" "$work/$name-$n2.out" $(( n2 - n1 ))
    fi
done
