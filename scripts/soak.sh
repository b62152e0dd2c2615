#!/usr/bin/env bash
# Soak test: mixed load against the real tarn (release build, `--wal-mode write`, data in a
# temp dir) over a fixed key set; checks that RSS stays flat and that, after a kill -9 under
# load and a restart on the same data, every acknowledged write is there.
#
# Usage: scripts/soak.sh
# Env:
#   SOAK_SECONDS    seconds of load (default 600)
#   SHARDS          tarn --shards (default 2)
#   WORKERS         load generator processes (default 2); each owns the keys k % WORKERS
#   CONNS           connections per worker (default 4)
#   PIPELINE        requests in flight per connection (default 64)
#   INTERVAL        seconds between RSS / throughput lines (default SOAK_SECONDS / 12,
#                   between 1 and 10)
#   KV_KEYS         keys of kv (default 100000)
#   CUSTOMER_KEYS   keys of customers (default 20000)
#   RSS_TOLERANCE   allowed |RSS at the end / RSS after the first minute - 1| (default 0.05;
#                   the baseline is taken after the first sixth for runs under six minutes)
#   SNAPSHOT_INTERVAL  seconds between box.snapshot calls under the load (default 0 = none,
#                   as the shipped checkpoint_interval takes none in ten minutes); the first
#                   comes halfway to the RSS baseline, so a snapshot's one-time heap growth
#                   falls before it; recovery then reads a snapshot and the WAL after it
#   SEED            seed of the operation mix (default 42)
#   KEEP_DIR        keep the work dir (tarn logs, data, worker models) instead of deleting it
#
# Mix (relative request counts): get 25, replace 20, delete 6, SELECT GE limit 10 on kv's
# primary key 4 and on customers' `composite` index 4, crud.get 12, crud.replace 14,
# crud.delete 6, crud.select with a condition 4, crud.insert_many with rollback_on_error 2
# (5 absent keys, a third of the batches with an existing key too, which its shard rolls
# back). Writes: 3/4 to kv, 1/4 to customers. Every INTERVAL it prints tarn's VmRSS and the
# requests per second of each type. Verdicts, each PASS or FAIL (exit 1 on any FAIL):
#   * RSS at the end within RSS_TOLERANCE of RSS after the first minute;
#   * no unexpected error reply and no wrong get / crud.get during the load;
#   * replies in every INTERVAL (no stall), up to the kill;
#   * with SNAPSHOT_INTERVAL, every box.snapshot under the load answered ok;
#   * after kill -9 under load and a restart: each key holds its last acknowledged state, or
#     that of its write in flight at the kill; deleted keys absent; no unknown keys.
# The logic is in scripts/soak.py (Python 3, standard library only).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }

# shellcheck source=lib/work_dir.sh
source "$here/lib/work_dir.sh"
build_release tarn
make_work_dir soak

python3 "$here/soak.py" \
    --tarn-bin "$root/target/release/tarn" \
    --tarn-config "$root/conf/tarn.toml" \
    --work "$work" \
    --seconds "${SOAK_SECONDS:-600}" \
    --shards "${SHARDS:-2}" \
    --workers "${WORKERS:-2}" \
    --conns "${CONNS:-4}" \
    --pipeline "${PIPELINE:-64}" \
    --interval "${INTERVAL:-0}" \
    --kv-keys "${KV_KEYS:-100000}" \
    --customer-keys "${CUSTOMER_KEYS:-20000}" \
    --rss-tolerance "${RSS_TOLERANCE:-0.05}" \
    --snapshot-interval "${SNAPSHOT_INTERVAL:-0}" \
    --seed "${SEED:-42}"
