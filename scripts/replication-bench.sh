#!/usr/bin/env bash
# A master's replace throughput with an asynchronous replica attached and without, and the
# replica's lag under that load (what each step measures: scripts/replication_bench.py).
#
# Usage: scripts/replication-bench.sh
# Env:
#   KEYS            kv rows loaded before measuring (default 1000000)
#   SHARDS          tarn --shards of master and replica (default 2)
#   CONNS, PIPELINE replaces' connections and requests in flight each (default 16 x 128)
#   SECONDS_PER_RUN, ROUNDS each run's length and the alternating rounds (default 10 s, 3)
#   KEEP_DIR        keep the work dir (logs, data) instead of deleting it
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

# shellcheck source=lib/work_dir.sh
source "$here/lib/work_dir.sh"
build_release tarn perf-simple-query
make_work_dir replication-bench

python3 "$here/replication_bench.py" \
    --tarn-bin "${TARN_BIN:-$root/target/release/tarn}" \
    --tarn-config "$root/conf/tarn.toml" \
    --perf-bin "${PERF_BIN:-$root/target/release/perf-simple-query}" \
    --work "$work" \
    --keys "${KEYS:-1000000}" \
    --shards "${SHARDS:-2}" \
    --conns "${CONNS:-16}" \
    --pipeline "${PIPELINE:-128}" \
    --seconds "${SECONDS_PER_RUN:-10}" \
    --rounds "${ROUNDS:-3}"
