#!/usr/bin/env bash
# Where nvc-hook's time goes on the real driver, without strace or perf (the GPU machine
# has neither): the hook logs the time of each of its phases at debug level
# (nvc_host::phases), and this script starts GPU containers through nvc-runtime and runc
# (all GPUs, utility,compute, a writable rootfs as engines give) and prints each phase's
# median. Then containers whose image asks `NVIDIA_REQUIRE_CUDA` (as nvidia/cuda images
# do): the first start has libcuda report its version, later ones take it from the
# driver-files cache; and what loading libcuda to ask costs in a fresh process.
# Needs .device-carry/ (prepare.sh). Usage: tests/gpu/profile-phases.sh OUT_DIR [STARTS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: profile-phases.sh OUT_DIR [STARTS]}
starts=${2:-25}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-phases.XXXXXX)
export NVC_GPU_RW_ROOTFS=1
. tests/gpu/common.sh >/dev/null
# The hook's state (driver-files cache, records, leases) on a tmpfs, as /run/nvc is.
state_dir=$(mktemp -d /dev/shm/nvc-phases-state.XXXXXX)
# A config of this run's own: debug log per group, its own driver-files cache.
config_for() { # config_for LOG: prints the config's path
    local cfg=$work/config-$(basename "$1").toml
    cat >"$cfg" <<TOML
[hook]
path = "$carry/bin/nvc-hook"
state-dir = "$state_dir"
[leases]
dir = "$state_dir/leases"
[runtime]
runtimes = ["$runtime"]
[log]
file = "$1"
level = "debug"
TOML
    echo "$cfg"
}
run_group() { # run_group NAME COUNT ENV
    local log=$work/$1.log cfg n b
    cfg=$(config_for "$log")
    for n in $(seq 1 "$2"); do
        b=$work/$1-$n
        bundle "$b" "$3" true >/dev/null
        (cd "$b" && NVC_CONFIG=$cfg "$carry/bin/nvc-runtime" --root "$work/state" run "$1-$n") >/dev/null 2>&1 ||
            echo "FAIL $1-$n: $(tail -2 "$log")"
        rm -rf "$b"
    done
}
uc='NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=utility,compute'
cuda_req='NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471'
run_group warm 3 "$uc"
run_group plain "$starts" "$uc"
run_group cuda-first 1 "$uc;$cuda_req"
run_group cuda "$starts" "$uc;$cuda_req"

python3 - "$work" <<'PY' | tee "$out/profile-phases.txt"
import re, statistics, sys
work = sys.argv[1]
def phases(group):
    rows = {}
    for line in open(f"{work}/{group}.log"):
        m = re.search(r"DEBUG: (prestart|set up|poststop) phases ms: (.*)", line)
        if not m:
            continue
        fields = m.group(2).split()
        for name, ms in zip(fields[::2], fields[1::2]):
            rows.setdefault(m.group(1), {}).setdefault(name, []).append(float(ms))
    return rows
for group in ["plain", "cuda-first", "cuda"]:
    rows = phases(group)
    n = len(rows.get("prestart", {}).get("total", []))
    print(f"== {group}: {n} starts, median ms per phase")
    for what, names in rows.items():
        cells = " ".join(f"{k} {statistics.median(v):.3f}" for k, v in names.items())
        print(f"  {what}: {cells}")
PY
echo "== loading libcuda to ask cuDriverGetVersion, fresh process each (ms):"
lib=$(ldconfig -p | awk '/libcuda.so.1 .*x86-64/ {print $NF; exit}')
for l in /usr/local/nvidia/lib64/libcuda.so.1 /usr/local/nvidia/lib/libcuda.so.1; do
    [ -z "$lib" ] && [ -e "$l" ] && lib=$l
done
for i in 1 2 3 4 5; do
    python3 -c '
import ctypes, sys, time
t = time.perf_counter()
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as e:
    sys.exit(f"  cannot load {sys.argv[1]}: {e}")
v = ctypes.c_int()
lib.cuDriverGetVersion(ctypes.byref(v))
print(f"  {(time.perf_counter() - t) * 1e3:.2f} ms (CUDA {v.value})")' "${lib:-libcuda.so.1}"
done 2>&1 | tee -a "$out/profile-phases.txt"
rm -rf "$work" "$state_dir"
