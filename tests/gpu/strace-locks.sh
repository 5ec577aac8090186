#!/usr/bin/env bash
# Where parallel GPU starts wait: nvc-bench's parallel-start table alone (RUNS batches of
# 100 containers, 16 in flight, real driver) under the carried strace, stopping only at
# flock and execve (--seccomp-bpf, so the rest runs untraced), then, per program (each
# hook's prestart and poststop), how long it lived and how long each of its flock calls
# waited (strace-locks.py). Needs .device-carry/ (prepare.sh). Usage: tests/gpu/strace-locks.sh OUT_DIR [BATCHES]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: strace-locks.sh OUT_DIR [BATCHES]}
batches=${2:-2}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-locks.XXXXXX)
strace=(env LD_LIBRARY_PATH="$carry/strace/lib" "$carry/strace/strace" -E LD_LIBRARY_PATH)
. tests/gpu/install-runc.sh
"${strace[@]}" --seccomp-bpf -f -ff -ttt -T -e trace=flock,execve -o "$work/t" -- \
    "$carry/bin/nvc-bench" --real --rootfs "$carry/bench/rootfs" --runc /usr/local/sbin/runc \
    --gpus none --libs 0 --runs 1 --parallel 100 --in-flight 16 --batches "$batches" \
    --work "$work/bench" >"$out/strace-locks-bench.log" 2>&1
echo "nvc-bench under strace: exit $?"
grep -A9 '#### Parallel starts' "$out/strace-locks-bench.log" | grep '^|'
python3 tests/gpu/strace-locks.py "$work/t" | tee "$out/strace-locks.txt"
rm -rf "$work"
