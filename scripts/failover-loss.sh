#!/usr/bin/env bash
# Acknowledged writes lost in a failover: runs `tests/failover.rs` ROUNDS times (a master
# under a pipelined replace load, 4 connections x 64 in flight, kill -9 after 1.5 s, its
# replica promoted) and prints each round's count, asynchronous and synchronous (quorum 2 of
# 2), then the totals.
#
# Usage: scripts/failover-loss.sh        Env: ROUNDS (default 5)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-5}
cargo test --release --test integration --no-run >/dev/null 2>&1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for round in $(seq 1 "$rounds"); do
    cargo test -q --release --test integration -- failover:: --nocapture --test-threads 1 2>&1 |
        grep '^failover,' | sed "s/^/round $round: /" | tee -a "$log"
done
for mode in asynchronous synchronous; do
    grep "failover, $mode" "$log" | sed -E 's/.* ([0-9]+) of ([0-9]+) acknowledged.*/\1 \2/' |
        awk -v mode="$mode" '{ lost += $1; acked += $2 }
            END { if (acked) printf "%s: %d of %d acknowledged writes lost in all rounds\n", mode, lost, acked }'
done
