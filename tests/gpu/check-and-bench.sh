#!/usr/bin/env bash
# One GPU-machine call for a change to the hook, the shim or their mounts: the runc
# end-to-end checks (e2e.sh, which also installs the carried runc), hostile images
# (hostile.sh), exclusive GPUs / attach / no trace (features.sh), then the full
# start-time benchmark with the real driver, against the build in .device-carry/prev
# (another commit's static shim and hook, made as tests/gpu/prepare.sh makes this one's),
# its tables written into docs/performance.md's `gpu` section (NVC_BENCH_RUNS runs per
# configuration, 30 by default; 0 skips the benchmark). Under 10 minutes.
# Needs .device-carry/ from tests/gpu/prepare.sh. Usage: tests/gpu/check-and-bench.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: check-and-bench.sh OUT_DIR}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/nvc-gpu.XXXXXX)
status=0
for script in e2e hostile features; do
    bash "tests/gpu/$script.sh" "$tmp/$script" >"$out/$script.txt" 2>&1 || status=1
    tail -n 1 "$out/$script.txt"
done
if [ "${NVC_BENCH_RUNS:-30}" = 0 ]; then
    echo "the benchmark skipped (NVC_BENCH_RUNS=0)"
    exit $status
fi
baseline=()
[ -x .device-carry/prev/nvc-hook ] && baseline=(--baseline .device-carry/prev)
NVC_BENCH_COMMIT=$(cat .device-carry/commit 2>/dev/null) .device-carry/bin/nvc-bench --real \
    --rootfs .device-carry/bench/rootfs --runc /usr/local/sbin/runc --gpus 1,64 --runs "${NVC_BENCH_RUNS:-30}" \
    "${baseline[@]}" \
    --update-doc docs/performance.md --section gpu --out "$out/bench-gpu.md" \
    >"$out/bench.log" 2>&1 || status=1
tail -n 3 "$out/bench.log"
cp docs/performance.md "$out/performance.md"
exit $status
