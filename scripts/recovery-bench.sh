#!/usr/bin/env bash
# Recovery time after a snapshot: tarn vs Tarantool 2.6, on the `customers` space.
#
# Usage: scripts/recovery-bench.sh
# Env:
#   ROWS            customers rows to load (default 2000000)
#   SHARDS          tarn --shards (default 0 = one per core)
#   CONNS, PIPELINE loader connections and requests in flight each (default 4 x 128)
#   CLIENT_SMP      loader executor threads (default 1)
#   SEED            seed of the rows (default 42; the same rows go to both servers)
#   TARN_MEMORY     tarn --memory (default: the config's 1GiB, as Tarantool's memtx_memory)
#   TARANTOOL_PORT  port of the reference Tarantool (default 3311)
#   REPEATS         restarts per server; recovery times are their median (default 3)
#   ONLY            tarn | tarantool: run one side only
#   KEEP_DIR        keep the work dir (logs, data) instead of deleting it
#
# For each server: start empty with WAL mode `write`, INSERT ROWS rows
# (`perf-simple-query --load-customers`: id, bucket_id = id % 3000, a..d in 0..1000, a 10-20
# letter name), `CALL box.snapshot`, stop with SIGTERM, start again on the same data and time
# the recovery (REPEATS restarts, median). tarn's recovery time is process start -> the last
# shard's `shard recovered` line (its `listening on` line comes once shard 0 has recovered,
# possibly before the others; printed too). Tarantool's is process start -> box.info.status
# 'running' (it sends its greeting before it loads the snapshot, and answers SELECTs with
# nothing while 'loading'; the greeting time is printed too). Both also get process start ->
# a SELECT finds the last row. The logic and the table are in scripts/recovery_bench.py.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

if ! command -v tarantool >/dev/null; then
    echo "tarantool is not on PATH; install it with: apt-get install -y tarantool" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }

# shellcheck source=lib/work_dir.sh
source "$here/lib/work_dir.sh"
build_release tarn perf-simple-query
make_work_dir recovery-bench

only=()
[[ -n ${ONLY:-} ]] && only=(--only "$ONLY")
python3 "$here/recovery_bench.py" \
    --tarn-bin "$root/target/release/tarn" \
    --tarn-config "$root/conf/tarn.toml" \
    --tarn-memory "${TARN_MEMORY:-}" \
    --perf-bin "$root/target/release/perf-simple-query" \
    --instance-lua "$here/tarantool/instance.lua" \
    --work "$work" \
    --rows "${ROWS:-2000000}" \
    --shards "${SHARDS:-0}" \
    --conns "${CONNS:-4}" \
    --pipeline "${PIPELINE:-128}" \
    --client-smp "${CLIENT_SMP:-1}" \
    --seed "${SEED:-42}" \
    --tarantool-port "${TARANTOOL_PORT:-3311}" \
    --repeats "${REPEATS:-3}" \
    "${only[@]}"
