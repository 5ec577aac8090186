#!/usr/bin/env bash
# Where each hook's time goes on the GPU machine, system call by system call: a short
# nvc-bench run with the real driver (GPU containers through nvc and through the floor
# program, the hooks alone) under the strace carried in .device-carry/strace (the GPU
# machine has none), then, per program (nvc-hook and nvc-floor, prestart and poststop),
# the median number of each system call and the time spent in it per process
# (strace-summary.py). strace's own cost is in every call's time, so read it for counts
# and for the calls that stand out, not as the programs' speed.
# Needs .device-carry/ (prepare.sh). Usage: tests/gpu/strace-hooks.sh OUT_DIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: strace-hooks.sh OUT_DIR [RUNS]}
runs=${2:-3}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-strace.XXXXXX)
strace=(env LD_LIBRARY_PATH="$carry/strace/lib" "$carry/strace/strace" -E LD_LIBRARY_PATH)
"${strace[@]}" -V | head -1 || { echo "no strace in $carry/strace"; exit 1; }
. tests/gpu/install-runc.sh
"${strace[@]}" -f -ff -T -o "$work/t" -- "$carry/bin/nvc-bench" --real \
    --rootfs "$carry/bench/rootfs" --runc /usr/local/sbin/runc --gpus none --libs 0 \
    --parallel 0 --runs "$runs" --work "$work/bench" >"$out/strace-bench.log" 2>&1
echo "nvc-bench under strace: exit $?"
python3 tests/gpu/strace-summary.py "$work/t" 30 | tee "$out/strace-hooks.txt"
rm -rf "$work"
