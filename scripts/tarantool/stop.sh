#!/usr/bin/env bash
# Stop a reference Tarantool instance started by start.sh.
# Usage: scripts/tarantool/stop.sh DIR
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
pid=""
for f in "$dir/launcher.pid" "$dir/tarantool.pid"; do
    if [[ -f $f ]]; then pid=$(cat "$f"); break; fi
done
if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
    echo "no running tarantool in $dir" >&2
    rm -f "$dir/launcher.pid" "$dir/ready"
    exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$dir/launcher.pid"; exit 0; }
    sleep 0.1
done
echo "tarantool (pid $pid) did not stop on TERM, sending KILL" >&2
kill -KILL "$pid" 2>/dev/null || true
rm -f "$dir/launcher.pid" "$dir/ready"
