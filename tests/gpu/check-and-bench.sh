#!/usr/bin/env bash
# One GPU-machine call for a change to the hook, the shim or their mounts: the runc
# end-to-end checks (e2e.sh, which also installs the carried runc), hostile images
# (hostile.sh), exclusive GPUs / attach / no trace (features.sh), then the full
# start-time benchmark with the real driver, against the build in .device-carry/prev
# (another commit's static shim and hook, made as tests/gpu/prepare.sh makes this one's),
# beside NVIDIA's Container Toolkit (its legacy and jit-cdi modes, `nvidia-ctk cdi
# generate`) and through Podman (nvc's CDI spec and hooks.d file), its tables written into
# docs/performance.md's `gpu` section (NVC_BENCH_RUNS runs per configuration, 30 by
# default; 0 skips the benchmark). Under 10 minutes.
# Needs .device-carry/ from tests/gpu/prepare.sh: carry .device-carry/check alone (its
# pack.tar.xz is unpacked here over .device-carry; podman.tar.xz beside it), or the
# folders themselves (bin, runc, poc, bench, prev, commit), then without Podman.
# Usage: tests/gpu/check-and-bench.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: check-and-bench.sh OUT_DIR}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/nvc-gpu.XXXXXX)
status=0
# The packed carry, unpacked, then removed: a later call on this machine that carries the
# folders themselves must not be overwritten by it.
if [ -s .device-carry/check/pack.tar.xz ]; then
    rm -rf .device-carry/{bin,runc,poc,bench,prev,commit}
    xz -dc .device-carry/check/pack.tar.xz | tar -C .device-carry -xf - || { echo "FAIL unpack .device-carry/check/pack.tar.xz"; exit 1; }
    rm -f .device-carry/check/pack.tar.xz
fi
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
# NVIDIA's Container Toolkit, from its archive (bin/ and lib/ under upstream/).
toolkit=()
if [ -s .device-carry/bench/nvidia-toolkit.tar.xz ]; then
    mkdir -p "$tmp/toolkit" && xz -dc .device-carry/bench/nvidia-toolkit.tar.xz | tar -C "$tmp/toolkit" -xf - &&
        toolkit=(--nvidia-toolkit "$tmp/toolkit/upstream")
fi
[ ${#toolkit[@]} = 0 ] && echo "NVIDIA's Container Toolkit not carried (.device-carry/bench/nvidia-toolkit.tar.xz): the benchmark runs without it"
# Podman 5.4 with conmon and netavark.
. tests/gpu/install-podman.sh
podman=()
if [ -s .device-carry/check/podman.tar.xz ] && install_podman .device-carry/check/podman.tar.xz "$tmp/podman"; then
    podman=(--podman "$tmp/podman/bin/podman")
fi
[ ${#podman[@]} = 0 ] && echo "Podman not carried (.device-carry/check/podman.tar.xz): the benchmark runs without it"
NVC_BENCH_COMMIT=$(cat .device-carry/commit 2>/dev/null) .device-carry/bin/nvc-bench --real \
    --rootfs .device-carry/bench/rootfs --runc /usr/local/sbin/runc --gpus 1,64 --runs "${NVC_BENCH_RUNS:-30}" \
    "${baseline[@]}" "${toolkit[@]}" "${podman[@]}" \
    --update-doc docs/performance.md --section gpu --out "$out/bench-gpu.md" \
    >"$out/bench.log" 2>&1 || status=1
tail -n 3 "$out/bench.log"
cp docs/performance.md "$out/performance.md"
exit $status
