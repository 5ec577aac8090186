#!/usr/bin/env bash
# GPU containers under real runc through nvc-runtime, on the GPU machine with its real
# driver. Needs what tests/gpu/prepare.sh gathered in .device-carry/.
# Usage: tests/gpu/e2e.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:-/tmp/nvc-e2e}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-e2e.XXXXXX)

. tests/gpu/common.sh

mounts_before=$(awk '{print $5}' /proc/self/mountinfo | sort)
host_l=$(nvidia-smi -L)
echo "\$ nvidia-smi -L   (host)"; echo "$host_l"

echo; echo "--- NVIDIA_VISIBLE_DEVICES=all"
all=$(ctr NVIDIA_VISIBLE_DEVICES=all 'nvidia-smi -L; echo "gpus: $(ls /proc/driver/nvidia/gpus)"; ls -l /dev/nvidia*; ldconfig -p | grep -E "libcuda.so.1|libnvidia-ml.so.1"; grep ModifyDeviceFiles /proc/driver/nvidia/params')
echo "$all"
check "nvidia-smi -L inside equals the host's" test "$(echo "$all" | grep '^GPU ')" = "$host_l"
check "the container's /proc/driver/nvidia/gpus lists the host's GPUs" test "$(echo "$all" | grep '^gpus:')" = "gpus: $(ls /proc/driver/nvidia/gpus | tr '\n' ' ' | sed 's/ $//')"
check "ldconfig -p lists libcuda.so.1" grep -q 'libcuda.so.1 ' <<<"$all"
check "ModifyDeviceFiles is 0 inside" grep -q 'ModifyDeviceFiles: 0' <<<"$all"

echo; echo "--- NVIDIA_VISIBLE_DEVICES=none"
none=$(ctr NVIDIA_VISIBLE_DEVICES=none 'echo "gpus: $(ls /proc/driver/nvidia/gpus)"; ls /dev/nvidia0 2>&1; nvidia-smi -L 2>&1; ls /usr/lib/x86_64-linux-gnu/libcuda.so.1')
echo "$none"
check "none: no GPU in /proc/driver/nvidia/gpus" grep -qx 'gpus: ' <<<"$none"
check "none: no /dev/nvidia0" grep -q 'No such file' <<<"$none"
check "none: driver libraries present" grep -q '^/usr/lib/x86_64-linux-gnu/libcuda.so.1$' <<<"$none"

echo; echo "--- NVIDIA_VISIBLE_DEVICES=void"
void=$(ctr NVIDIA_VISIBLE_DEVICES=void 'nvidia-smi -L 2>/dev/null; ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/libcuda* 2>/dev/null')
echo "[$void]"
check "void prints nothing" test -z "$void"

echo; echo "--- NVIDIA_VISIBLE_DEVICES=0, NVIDIA_DRIVER_CAPABILITIES=utility"
util=$(ctr 'NVIDIA_VISIBLE_DEVICES=0;NVIDIA_DRIVER_CAPABILITIES=utility' 'nvidia-smi -L; ls /usr/lib/x86_64-linux-gnu/ | grep -E "libcuda|libnvidia-ml"')
echo "$util"
check "utility: nvidia-smi works" grep -q '^GPU 0' <<<"$util"
check "utility: no libcuda" test -z "$(grep libcuda <<<"$util")"
echo; echo "--- an unmet requirement"
req=$(ctr 'NVIDIA_VISIBLE_DEVICES=all;NVIDIA_REQUIRE_CUDA=cuda>=99.0' 'echo started'; true)
echo "$req"
check "unmet requirement: container does not start" test -z "$(grep -x started <<<"$req")"
check "unmet requirement: the reason reaches the user" grep -q 'cuda>=99.0' <<<"$req"
# The static hook asks libcuda through nvc-cuda-version: the version it got is the one
# nvidia-smi reports.
smi=$(command -v nvidia-smi || echo /usr/local/nvidia/bin/nvidia-smi)
cuda=$("$smi" | grep -o 'CUDA Version: [0-9.]*' | awk '{print $3}')
echo "nvidia-smi: CUDA $cuda"
check "unmet requirement: it gives the driver's CUDA version" grep -qF "$cuda" <<<"${req//cuda>=99.0/}"

echo; echo "--- the device plugin's volume-mounts strategy, the environment not trusted"
{ cat "$work/config.toml"; printf '[requests]\naccept-envvar-when-unprivileged = false\naccept-devices-as-volume-mounts = true\n'; } >"$work/secure.toml"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
vm() { # vm [DEVICE-ID]: a container asking for all GPUs by its environment, with a mount
    local b; b=$(mktemp -d "$work/bundle.XXXXXX")
    bundle "$b" "NVIDIA_VISIBLE_DEVICES=all" 'nvidia-smi -L 2>&1; ls /var/run/nvidia-container-devices 2>&1' >/dev/null
    if [ -n "${1:-}" ]; then (cd "$b" && python3 - "$1" <<'PY'
import json, sys
c = json.load(open("config.json"))
c["mounts"].append({"destination": "/var/run/nvidia-container-devices/" + sys.argv[1],
                    "type": "bind", "source": "/dev/null", "options": ["bind", "ro"]})
json.dump(c, open("config.json", "w"), indent=1)
PY
    ); fi
    (cd "$b" && NVC_CONFIG=$work/secure.toml "$carry/bin/nvc-runtime" --root "$work/state" run "$(basename "$b")") 2>&1
}
mounted=$(vm "$uuid"); echo "$mounted"
check "volume-mounts: the GPU the mount names is the container's" grep -q "(UUID: $uuid)" <<<"$mounted"
check "volume-mounts: the mount is taken out of the container" grep -q 'No such file' <<<"$mounted"
envonly=$(vm); echo "$envonly"
check "volume-mounts: the environment alone gives no GPU under this setting" test -z "$(grep '^GPU ' <<<"$envonly")"

echo
check "the host's mount table is as before" test "$mounts_before" = "$(awk '{print $5}' /proc/self/mountinfo | sort)"
cp "$work/config.toml" "$out/" 2>/dev/null
echo; [ $fail = 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $fail
