#!/usr/bin/env bash
# Everything the GPU machine checks, in one call (under 10 minutes): the validation
# report (validate.py), the runc end-to-end checks (e2e.sh), the CDI spec in runc
# containers (cdi.sh), hostile images
# against the real driver (hostile.sh), discovery against nvidia-smi
# (discovery.sh), where the hook's time goes (profile-phases.sh), the start-time benchmark with the real driver (nvc-bench --real) and,
# where .device-carry/engines/ is there, GPU containers through Docker, Podman and
# containerd's CRI plugin (engines.sh; its archive is about 55 MB, so with the 64 MiB a
# call carries it runs in a call of its own, carrying .device-carry/engines alone: nvc's
# binaries, runc and the commit come in engines/support.tar.xz).
# Needs .device-carry/ from tests/gpu/prepare.sh. Usage: tests/gpu/run-all.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: run-all.sh OUT_DIR}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/nvc-gpu.XXXXXX)
status=0

python3 tests/gpu/validate.py --out "$tmp/validate" --reps 5 --starts 20 >"$out/validate.log" 2>&1 || status=1
cp "$tmp/validate/gpu-validation.md" "$out/" 2>/dev/null
bash tests/gpu/e2e.sh "$tmp/e2e" >"$out/e2e.txt" 2>&1 || status=1
bash tests/gpu/cdi.sh "$tmp/cdi" >"$out/cdi.txt" 2>&1 || status=1
bash tests/gpu/hostile.sh "$tmp/hostile" >"$out/hostile.txt" 2>&1 || status=1
bash tests/gpu/features.sh "$tmp/features" >"$out/features.txt" 2>&1 || status=1
bash tests/gpu/discovery.sh .device-carry/bin "$tmp/discovery" >"$out/discovery.txt" 2>&1 || status=1
bash tests/gpu/profile-phases.sh "$tmp/phases" >"$out/phases.log" 2>&1 || status=1
cp "$tmp/phases/profile-phases.txt" "$out/" 2>/dev/null
if [ -x .device-carry/bin/nvc-bench ]; then
    NVC_BENCH_COMMIT=$(cat .device-carry/commit 2>/dev/null) .device-carry/bin/nvc-bench --real --rootfs .device-carry/bench/rootfs \
        --runc /usr/local/sbin/runc --update-doc docs/performance.md --section gpu \
        >"$out/bench.txt" 2>&1 || status=1
    cp docs/performance.md "$out/performance.md"
fi
if [ -s .device-carry/engines/engines.tar.xz ]; then
    bash tests/gpu/engines.sh "$tmp/engines" >"$out/engines.txt" 2>&1 || status=1
    cp "$tmp/engines/engines.md" "$out/" 2>/dev/null
fi
tail -n 3 "$out/validate.log" "$out/e2e.txt" "$out/cdi.txt" "$out/hostile.txt" "$out/features.txt" "$out/discovery.txt" "$out/bench.txt" "$out/engines.txt" 2>/dev/null
exit $status
