#!/usr/bin/env bash
# Checks that Cargo.toml's `rust-version` is true, with the one toolchain at hand:
#
# 1. no locked dependency (for the Linux target tarn builds for, dev-dependencies included)
#    declares a higher `rust-version` than tarn does: otherwise the declared version could
#    not even build the dependencies;
# 2. tarn's own code uses no std API stabilised after the declared version: clippy's
#    `incompatible_msrv` lint, which reads the version from Cargo.toml. The lint is on
#    by default (clippy::suspicious), so `cargo clippy --all-targets -- -D warnings` in
#    .ci/run enforces it; this script refuses an `allow` of it anywhere in the code.
#
# Declaring a version above the dependencies' highest is allowed (tarn's code may need
# more), but printed, so that whoever raises it says why in the commit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

declared=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
if [[ -z $declared ]]; then
    echo "Cargo.toml declares no rust-version" >&2
    exit 1
fi

# `name version rust-version` of every package in the resolved graph, highest last.
highest=$(cargo metadata --format-version 1 --locked \
    --filter-platform x86_64-unknown-linux-gnu 2>/dev/null | python3 -c '
import json, sys
metadata = json.load(sys.stdin)
resolved = {node["id"] for node in metadata["resolve"]["nodes"]}
root = metadata["resolve"]["root"]
rows = []
for package in metadata["packages"]:
    version = package.get("rust_version")
    if package["id"] in resolved and package["id"] != root and version:
        key = tuple(int(part) for part in version.split("."))
        rows.append((key, package["name"], package["version"], version))
rows.sort()
for _, name, version, rust_version in rows[-3:]:
    print(name, version, rust_version)
')
echo "highest rust-version among the locked dependencies:"
echo "$highest" | sed 's/^/  /'
required=$(echo "$highest" | tail -n 1 | cut -d' ' -f3)

as_number() {
    local major minor patch
    IFS=. read -r major minor patch <<<"$1"
    echo $((major * 1000000 + ${minor:-0} * 1000 + ${patch:-0}))
}

if (($(as_number "$declared") < $(as_number "$required"))); then
    echo "rust-version $declared is below $required, which a locked dependency needs" >&2
    exit 1
fi
if (($(as_number "$declared") > $(as_number "$required"))); then
    echo "note: rust-version $declared is above what the dependencies need ($required)"
fi

if grep -rn 'incompatible_msrv' src tests benches --include='*.rs' | grep -v '^\S*: *//'; then
    echo "the incompatible_msrv lint is allowed above: the declared rust-version is not checked there" >&2
    exit 1
fi
if grep -n '^ *msrv' clippy.toml 2>/dev/null; then
    echo "clippy.toml sets msrv: it must come from Cargo.toml's rust-version" >&2
    exit 1
fi

echo "rust-version $declared: ok"
