# Sourced by the scripts that start a tarn and a reference Tarantool side by side
# (compare-tarantool.sh, rss-per-tuple.sh): stops whichever of the two was started.
# Reads the callers' globals: tarn_pid (empty if tarn was not started), tarantool_dir (empty
# if Tarantool was not started) and here (the scripts/ directory).

stop_servers() {
    if [[ -n ${tarn_pid:-} ]] && kill -0 "$tarn_pid" 2>/dev/null; then
        kill -TERM "$tarn_pid" 2>/dev/null || true
        wait "$tarn_pid" 2>/dev/null || true
    fi
    if [[ -n ${tarantool_dir:-} ]]; then
        "$here/tarantool/stop.sh" "$tarantool_dir" >/dev/null 2>&1 || true
    fi
}
