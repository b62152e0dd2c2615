#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation on the stable toolchain
# (no nightly, no cargo-fuzz) and runs one:
#
#   fuzz/run.sh TARGET [libFuzzer options...]     e.g. fuzz/run.sh update_ops -runs=10000000
#   fuzz/run.sh --build-only                      builds every target (what CI could run)
#
# The corpus grows in fuzz/corpus/TARGET (not checked in), seeded from fuzz/seeds/TARGET;
# crashes land in fuzz/artifacts/TARGET/. The instrumentation is the one cargo-fuzz passes
# (sancov with inline 8-bit counters, PC table and comparison tracing), all stable rustc
# flags; cargo-fuzz's AddressSanitizer needs -Zsanitizer (nightly or RUSTC_BOOTSTRAP=1)
# and is left out: the code under test is safe Rust but for a few audited blocks. The
# release profile in fuzz/Cargo.toml keeps debug assertions and overflow checks on.
set -euo pipefail
cd "$(dirname "$0")"
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="${RUSTFLAGS:-} --cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0"
# --target keeps the instrumentation off build scripts and proc macros.
if [[ "${1:-}" == "--build-only" ]]; then
    nice cargo build --release --target "$triple" --bins
    exit 0
fi
target=${1:?usage: fuzz/run.sh TARGET [libFuzzer options...]}
shift
nice cargo build --release --target "$triple" --bin "$target"
mkdir -p "corpus/$target" "artifacts/$target"
exec nice "target/$triple/release/$target" -artifact_prefix="artifacts/$target/" \
    "$@" "corpus/$target" "seeds/$target"
