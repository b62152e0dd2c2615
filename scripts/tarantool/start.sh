#!/usr/bin/env bash
# Start the reference Tarantool instance in the background and wait until
# its port answers with an IPROTO greeting.
# Usage: scripts/tarantool/start.sh PORT [DIR]
#   DIR defaults to a fresh directory under ${TMPDIR:-/tmp}.
# Prints the work dir on stdout. Env knobs: see instance.lua; TARANTOOL names the binary
# (default: tarantool on PATH).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 PORT [DIR]" >&2
    exit 2
fi
port=$1
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/tarantool-ref.XXXXXX")}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

tarantool=${TARANTOOL:-tarantool}
command -v "$tarantool" >/dev/null || { echo "$tarantool not installed" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

if [[ -f "$dir/tarantool.pid" ]] && kill -0 "$(cat "$dir/tarantool.pid")" 2>/dev/null; then
    echo "tarantool already running in $dir (pid $(cat "$dir/tarantool.pid"))" >&2
    exit 1
fi

rm -f "$dir/ready"
nohup "$tarantool" "$here/instance.lua" "$port" "$dir" \
    >"$dir/stdout.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/launcher.pid"

# Wait up to ~20 s for the greeting.
for _ in $(seq 1 200); do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "tarantool exited early; log:" >&2
        tail -n 30 "$dir/tarantool.log" "$dir/stdout.log" >&2 2>/dev/null || true
        exit 1
    fi
    if greeting=$(timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && head -c 9 <&3" 2>/dev/null) \
        && [[ $greeting == Tarantool ]] \
        && [[ -f "$dir/ready" ]]; then
        echo "$dir"
        exit 0
    fi
    sleep 0.1
done
echo "tarantool did not answer on port $port in time" >&2
kill "$pid" 2>/dev/null || true
exit 1
