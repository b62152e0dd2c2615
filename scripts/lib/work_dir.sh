# Sourced by the benchmark and soak scripts: builds the release binaries they run and makes
# the work directory they run in, removed at exit unless KEEP_DIR is set.
#
#   build_release BIN...        cargo build --release of these binaries, from $root
#   make_work_dir NAME          sets $work to a fresh ${TMPDIR:-/tmp}/NAME.XXXXXX
#
# Expects $root (the repository) to be set by the sourcing script.

build_release() {
    echo "building $* (release)..." >&2
    local bins=()
    for bin in "$@"; do bins+=(--bin "$bin"); done
    (cd "$root" && cargo build --release --quiet "${bins[@]}")
}

make_work_dir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap remove_work_dir EXIT
}

remove_work_dir() {
    if [[ -n ${KEEP_DIR:-} ]]; then
        echo "kept $work" >&2
    else
        rm -rf "$work"
    fi
}
