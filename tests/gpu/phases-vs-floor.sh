#!/usr/bin/env bash
# nvc-hook's phases beside the floor program's, on the real driver: a short nvc-bench run
# with --debug-log (nvc-hook logs the time of each of its phases, the floor program its
# own, in the same alternated rounds, the hooks alone included), then the median of each
# phase for GPU containers with all GPUs and utility,compute, lined up: what the floor
# does too, and what only nvc does (phases-vs-floor.py). Debug logging costs a little
# time of its own: read the phases against each other, not the tables as the targets.
# Needs .device-carry/ (prepare.sh). Usage: tests/gpu/phases-vs-floor.sh OUT_DIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: phases-vs-floor.sh OUT_DIR [RUNS]}
runs=${2:-20}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-phases-floor.XXXXXX)
. tests/gpu/install-runc.sh
"$carry/bin/nvc-bench" --real --debug-log --rootfs "$carry/bench/rootfs" \
    --runc /usr/local/sbin/runc --gpus none --libs 0 --parallel 0 --runs "$runs" \
    --work "$work/bench" --out "$out/phases-bench.md" >/dev/null 2>"$out/phases-bench.log"
echo "nvc-bench --debug-log: exit $?"
python3 tests/gpu/phases-vs-floor.py "$work/bench" | tee "$out/phases-vs-floor.txt"
rm -rf "$work"
