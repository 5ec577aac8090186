#!/usr/bin/env bash
# The statically linked hook on the GPU machine, in one call: the functional checks
# (e2e, hostile, features), where the hook's time goes (profile-phases, including the
# first start of a CUDA image, which asks nvc-cuda-version), the benchmark against
# 78b1919 (.device-carry/old) written into docs/performance.md's gpu section, and this
# build against the same code with a dynamically linked hook (.device-carry/prev).
# Usage: tests/gpu/static-hook.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: static-hook.sh OUT_DIR}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/nvc-gpu.XXXXXX)
status=0
for s in e2e hostile features; do
    bash tests/gpu/$s.sh "$tmp/$s" >"$out/$s.txt" 2>&1 || status=1
    echo "$s: $(grep -c '^PASS' "$out/$s.txt") passed, $(grep -c '^FAIL' "$out/$s.txt") failed"
done
bash tests/gpu/profile-phases.sh "$tmp/phases" >"$out/phases.log" 2>&1 || status=1
cp "$tmp/phases/profile-phases.txt" "$out/" 2>/dev/null
commit=$(cat "$carry/commit")
NVC_BENCH_COMMIT=$commit "$carry/bin/nvc-bench" --real --rootfs "$carry/bench/rootfs" \
    --runc /usr/local/sbin/runc --gpus 1,64 --baseline "$carry/old" \
    --update-doc docs/performance.md --section gpu --out "$out/bench-gpu.md" >"$out/bench.log" 2>&1 || status=1
cp docs/performance.md "$out/performance.md"
NVC_BENCH_COMMIT=$commit "$carry/bin/nvc-bench" --real --rootfs "$carry/bench/rootfs" \
    --runc /usr/local/sbin/runc --runs 60 --gpus none --libs 0 --parallel 0 --baseline "$carry/prev" \
    --out "$out/bench-static-vs-dynamic.md" >"$out/bench-static.log" 2>&1 || status=1
sed -n '/Against a baseline build/,/^#### Targets/p' "$out/bench-static-vs-dynamic.md" | grep '^|'
grep -A12 '^#### Targets' "$out/bench-gpu.md" | grep '^|'
exit $status
