#!/usr/bin/env bash
# This build against a base build on the GPU machine: nvc-bench --baseline, which times
# both builds' container starts and hooks in the same rounds (the machine's speed drifts by
# tens of percent from minute to minute, so two separate runs cannot be compared). The
# base is .device-carry/old, built by tests/gpu/prepare.sh with NVC_OLD_COMMIT set.
# Usage: tests/gpu/bench-compare.sh OUT_DIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: bench-compare.sh OUT_DIR [RUNS]}
runs=${2:-40}
mkdir -p "$out"
. tests/gpu/install-runc.sh
echo "this build: $(cat "$carry/commit"); baseline: $(cat "$carry/old/commit")"
NVC_BENCH_COMMIT=$(cat "$carry/commit") "$carry/bin/nvc-bench" --real --rootfs "$carry/bench/rootfs" \
    --runc /usr/local/sbin/runc --runs "$runs" --libs 0 --baseline "$carry/old" \
    --out "$out/bench-compare.md" >"$out/bench-compare.log" 2>&1 || { tail -20 "$out/bench-compare.log"; exit 1; }
sed -n '/Against a baseline build/,/^#### Targets/p' "$out/bench-compare.md" | grep -v '^#### Targets'
