# Sourced by the GPU-machine scripts (e2e.sh, cdi.sh, hostile.sh): installs the carried runc,
# builds a small rootfs with no NVIDIA file in $work/rootfs, writes an nvc config and
# defines check(), bundle() and ctr(). Expects $carry, $out and $work set; $fail counts.
# NVC_GPU_RUNTIME names the low-level runtime nvc-runtime execs (default: that runc;
# tests/gpu/runtimes.sh passes crun and a newer runc); NVC_GPU_RW_ROOTFS=1 makes the
# bundles' rootfs writable (it is read-only otherwise).

fail=0
check() { # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fail=1; fi
}

. tests/gpu/install-runc.sh
runc --version | head -1
runtime=${NVC_GPU_RUNTIME:-/usr/local/sbin/runc}
echo "low-level runtime: $("$runtime" --version | head -1)"

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
runtimes = ["$runtime"]
[log]
file = "$out/nvc.log"
level = "debug"
TOML
export NVC_CONFIG=$work/config.toml

bundle() { # bundle DIR ENV SCRIPT: a fresh copy of the rootfs each, as engines give
    mkdir -p "$1" && cp -a "$rootfs" "$1/rootfs" && (cd "$1" && runc spec && python3 - "$2" "$3" <<'PY'
import json, os, sys
env, script, rootfs = sys.argv[1], sys.argv[2], "rootfs"
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", script]
c["process"]["env"] += [e for e in env.split(";") if e]
# No ambient capabilities: runc 1.1's spec lists some it cannot raise without inheritable
# ones, and runc 1.3 then warns on every start (engines set none).
c["process"].get("capabilities", {}).pop("ambient", None)
c["root"] = {"path": rootfs, "readonly": os.environ.get("NVC_GPU_RW_ROOTFS") != "1"}
json.dump(c, open("config.json", "w"), indent=1)
PY
)
}
ctr() { # ctr "ENV1;ENV2" SCRIPT -> prints the container's output
    local b; b=$(mktemp -d "$work/bundle.XXXXXX")
    bundle "$b" "$1" "$2" >/dev/null
    (cd "$b" && "$carry/bin/nvc-runtime" --root "$work/state" run "$(basename "$b")") 2>&1
}

