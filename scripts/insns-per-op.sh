#!/usr/bin/env bash
# Instructions per operation, counted by callgrind (exact, needs no hardware counters):
# runs `perf-simple-query --smp 1 --operations-per-shard N` at two values of N under
# `valgrind --tool=callgrind` and prints, for get, replace and update,
#     insns/op: (Ir(N2) - Ir(N1)) / (N2 - N1)
# Start-up, population and shutdown are the same in both runs and cancel out.
#
# Needs the in-process mode of perf-simple-query (issue 4, built after --connect). Until that
# mode exists this script stops with the tool's own message.
#
# With CONNECT=HOST:PORT it measures the --connect client instead (a server must be running
# there); that counts only the load generator's instructions, which is how the script itself
# is checked before the in-process mode exists.
#
# Usage: scripts/insns-per-op.sh
# Env: N1 (default 2000), N2 (default 12000), PARTITIONS (default 10000), CONCURRENCY
#      (default 100), CONNECT (see above), KEEP_DIR (keep callgrind outputs)
#
# Noise: the sampler thread polls every 10 ms and is counted too; the second run lasts
# longer, so a few hundred thousand instructions of polling land in the difference. With the
# defaults that is tens of insns/op at most; raise N2 - N1 to shrink it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
n1=${N1:-2000}
n2=${N2:-12000}
partitions=${PARTITIONS:-10000}
concurrency=${CONCURRENCY:-100}
connect=${CONNECT:-}

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

mode_args=(--smp 1 --partitions "$partitions" --random-seed 1)
if [[ -n $connect ]]; then
    mode_args+=(--connect "$connect" --conns 1 --pipeline "$concurrency")
    echo "note: CONNECT=$connect counts the client's instructions only, not the server's" >&2
else
    mode_args+=(--concurrency "$concurrency")
fi

# Fail early and clearly when the mode cannot run at all (e.g. in-process not built yet).
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

for load in "get:" "replace:--write" "update:--update"; do
    name=${load%%:*}
    flag=${load#*:}
    # shellcheck disable=SC2086 # $flag is one optional word
    ir1=$(instructions "$work/$name-$n1.out" "${mode_args[@]}" --operations-per-shard "$n1" $flag)
    # shellcheck disable=SC2086
    ir2=$(instructions "$work/$name-$n2.out" "${mode_args[@]}" --operations-per-shard "$n2" $flag)
    per_op=$(( (ir2 - ir1) / (n2 - n1) ))
    echo "$name insns/op: $per_op   (Ir $ir1 at N=$n1, $ir2 at N=$n2)"
done
