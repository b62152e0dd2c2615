#!/usr/bin/env bash
# An index built while serving: create_index of a 5-part TREE index on ROWS customers rows
# while perf-simple-query runs gets; against recovery's bulk build of the same index.
#
# Usage: scripts/ddl-build-bench.sh
# Env:
#   ROWS            customers rows (default 2000000)
#   SHARDS          tarn --shards (default 2)
#   CONNS, PIPELINE gets' connections and requests in flight each (default 16 x 128)
#   CLIENT_SMP      perf-simple-query executor threads (default 1)
#   KEEP_DIR        keep the work dir (logs, data) instead of deleting it
#
# What each step measures is in scripts/ddl_build_bench.py.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

# shellcheck source=lib/work_dir.sh
source "$here/lib/work_dir.sh"
build_release tarn perf-simple-query
make_work_dir ddl-build-bench

python3 "$here/ddl_build_bench.py" \
    --tarn-bin "$root/target/release/tarn" \
    --tarn-config "$root/conf/tarn.toml" \
    --perf-bin "$root/target/release/perf-simple-query" \
    --work "$work" \
    --rows "${ROWS:-2000000}" \
    --shards "${SHARDS:-2}" \
    --conns "${CONNS:-16}" \
    --pipeline "${PIPELINE:-128}" \
    --client-smp "${CLIENT_SMP:-1}"
