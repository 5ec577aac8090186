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
fail=0
check() { # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fail=1; fi
}

# runc and its libseccomp from Debian's packages.
install -m 0755 "$carry/runc/usr/sbin/runc" /usr/local/sbin/runc
cp -a "$carry"/runc/usr/lib/x86_64-linux-gnu/libseccomp.so.2* /usr/local/lib/ && ldconfig
runc --version | head -1

# A small rootfs from this machine's own glibc: busybox, libc, the loader, a static
# ldconfig. No NVIDIA file, no /dev/nvidia*.
rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,sbin,etc,dev,proc,sys,tmp,run,usr/lib/x86_64-linux-gnu,lib64}
cp "$carry/runc/bin/busybox" "$rootfs/bin/busybox"
for a in sh ls cat echo grep head wc readlink test stat find; do ln -s busybox "$rootfs/bin/$a"; done
for l in libc.so.6 libdl.so.2 libpthread.so.0 libm.so.6 librt.so.1 libgcc_s.so.1; do
    [ -e "/lib/x86_64-linux-gnu/$l" ] && cp -L "/lib/x86_64-linux-gnu/$l" "$rootfs/usr/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
ldc=/sbin/ldconfig.real; [ -x "$ldc" ] || ldc=/sbin/ldconfig
cp -L "$ldc" "$rootfs/sbin/ldconfig"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rootfs/etc/passwd"
echo /usr/lib/x86_64-linux-gnu >"$rootfs/etc/ld.so.conf"
ldconfig -r "$rootfs"
find "$rootfs" -name '*nvidia*' -o -name 'libcuda*' | grep . && { echo "rootfs has NVIDIA files"; fail=1; }

cat >"$work/config.toml" <<TOML
[hook]
path = "$carry/bin/nvc-hook"
[runtime]
runtimes = ["/usr/local/sbin/runc"]
[log]
file = "$out/nvc.log"
level = "debug"
TOML
export NVC_CONFIG=$work/config.toml

bundle() { # bundle DIR ENV SCRIPT: a fresh copy of the rootfs each, as engines give
    mkdir -p "$1" && cp -a "$rootfs" "$1/rootfs" && (cd "$1" && runc spec && python3 - "$2" "$3" <<'PY'
import json, sys
env, script, rootfs = sys.argv[1], sys.argv[2], "rootfs"
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", script]
c["process"]["env"] += [e for e in env.split(";") if e]
c["root"] = {"path": rootfs, "readonly": True}
json.dump(c, open("config.json", "w"), indent=1)
PY
)
}
ctr() { # ctr "ENV1;ENV2" SCRIPT -> prints the container's output
    local b; b=$(mktemp -d "$work/bundle.XXXXXX")
    bundle "$b" "$1" "$2" >/dev/null
    (cd "$b" && "$carry/bin/nvc-runtime" --root "$work/state" run "$(basename "$b")") 2>&1
}

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

echo
check "the host's mount table is as before" test "$mounts_before" = "$(awk '{print $5}' /proc/self/mountinfo | sort)"
cp "$work/config.toml" "$out/" 2>/dev/null
echo; [ $fail = 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $fail
