# Sourced by the scripts that start a tarn and a reference Tarantool side by side
# (compare-tarantool.sh, rss-per-tuple.sh). Reads and sets the callers' globals: tarn_bin,
# root, work and here (the scripts/ directory) are read; tarn_pid and tarn_addr are set by
# start_tarn; tarantool_dir (empty if Tarantool was not started) is read by stop_servers.

# Starts tarn on an ephemeral loopback port with the shipped config, the data in
# $work/tarn-data, its log in $work/tarn.log, and the given flags; waits until it listens.
start_tarn() {
    NO_COLOR=1 RUST_LOG=info "$tarn_bin" --config "$root/conf/tarn.toml" --listen 127.0.0.1:0 \
        --data-dir "$work/tarn-data" "$@" >"$work/tarn.out" 2>"$work/tarn.log" &
    tarn_pid=$!
    tarn_addr=""
    for _ in $(seq 1 300); do
        tarn_addr=$(grep -o 'listening on [0-9.:]*' "$work/tarn.log" | head -n 1 | cut -d' ' -f3 || true)
        [[ -n $tarn_addr ]] && return 0
        kill -0 "$tarn_pid" 2>/dev/null || { echo "tarn exited early:" >&2; tail -n 20 "$work/tarn.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "tarn did not report its address" >&2
    exit 1
}

# Stops whichever of the two servers was started.
stop_servers() {
    if [[ -n ${tarn_pid:-} ]] && kill -0 "$tarn_pid" 2>/dev/null; then
        kill -TERM "$tarn_pid" 2>/dev/null || true
        wait "$tarn_pid" 2>/dev/null || true
    fi
    if [[ -n ${tarantool_dir:-} ]]; then
        "$here/tarantool/stop.sh" "$tarantool_dir" >/dev/null 2>&1 || true
    fi
}
