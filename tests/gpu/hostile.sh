#!/usr/bin/env bash
# Hostile images against the real driver on the GPU machine: each case is a fresh copy of
# the small rootfs with one attack in it, started through nvc-runtime under real runc.
# Every case checks that the attack had no effect on the host (a sentinel tree, the host's
# /etc/ld.so.cache, its mount table, no marker file) and that the container either started
# or failed with a message naming the path. Needs .device-carry/ from tests/gpu/prepare.sh.
# Usage: tests/gpu/hostile.sh [OUT_DIR] [RACE_STARTS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:-/tmp/nvc-hostile}
race_starts=${2:-300}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-hostile.XXXXXX)

. tests/gpu/common.sh

# What must not change: a sentinel tree, the host's ld.so.cache and mount table.
outside=$work/outside
mkdir -p "$outside/etc" "$outside/lib"
echo sentinel >"$outside/etc/ld.so.cache"
echo sentinel >"$outside/lib/libcuda.so.1"
echo sentinel >"$outside/host-secret"
digest() { (cd "$outside" && find . -printf '%p %y %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
outside_before=$(digest)
cache_before=$(sha256sum /etc/ld.so.cache)
mounts_before=$(awk '{print $5}' /proc/self/mountinfo | sort)
marker=/tmp/nvc-poc-marker
rm -f "$marker"
host_unchanged() {
    [ "$(digest)" = "$outside_before" ] && [ "$(sha256sum /etc/ld.so.cache)" = "$cache_before" ] &&
        [ "$(awk '{print $5}' /proc/self/mountinfo | sort)" = "$mounts_before" ] && [ ! -e "$marker" ]
}

# hostile NAME PATH-IN-ROOTFS PREP-SHELL-COMMAND: PREP runs in the copy of the rootfs.
hostile() {
    local name=$1 path=$2 prep=$3 b res
    b=$(mktemp -d "$work/bundle.XXXXXX")
    bundle "$b" 'NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=all' \
        'nvidia-smi -L >/dev/null 2>&1 && echo smi-ok; cat /host-secret /usr/lib/x86_64-linux-gnu/host-secret /lib/firmware/host-secret 2>/dev/null; echo started' >/dev/null
    (cd "$b/rootfs" && eval "$prep")
    res=$(cd "$b" && timeout 60 "$carry/bin/nvc-runtime" --root "$work/state" run "$(basename "$b")" 2>&1)
    [ $? = 124 ] && res="TIMED OUT after 60 s: $res"
    echo "--- $name: $(echo "$res" | tr '\n' ' ' | sed "s/.*stderr: //" | cut -c1-300)"
    check "$name: the host is unchanged" host_unchanged
    check "$name: nothing from the host is visible inside" test -z "$(grep -x sentinel <<<"$res")"
    check "$name: the start ended in time" test -z "$(grep '^TIMED OUT' <<<"$res")"
    if grep -qx started <<<"$res"; then
        echo "    (started)"
    else
        check "$name: the failure names $path" grep -qF "$path" <<<"$res"
    fi
    "$carry/runc/usr/sbin/runc" --root "$work/state" delete -f "$(basename "$b")" >/dev/null 2>&1
}

link() { # link PATH TARGET: replaces PATH in the rootfs by a symlink
    echo "rm -rf ./$1; mkdir -p \$(dirname ./$1); ln -s '$2' ./$1"
}
version=$(grep -o '[0-9]\+\.[0-9]\+\.[0-9]\+' /proc/driver/nvidia/version | head -1)
for path in usr/lib/x86_64-linux-gnu usr/bin lib/firmware lib/firmware/nvidia/$version etc \
    etc/ld.so.cache etc/ld.so.conf.d usr/local/cuda/compat usr/share/vulkan/icd.d \
    usr/share/glvnd/egl_vendor.d run/nvidia-persistenced dev; do
    hostile "/$path -> absolute" "/$path" "$(link "$path" "$outside")"
    hostile "/$path -> ../" "/$path" "$(link "$path" "../../../../../../../../..$outside")"
    hostile "/$path -> /proc/1/root" "/$path" "$(link "$path" "/proc/1/root$outside")"
    hostile "/$path -> /proc/self/cwd" "/$path" "$(link "$path" "/proc/self/cwd/../../../../..$outside")"
    hostile "/$path -> dangling" "/$path" "$(link "$path" "/nowhere/at/all")"
done
# CVE-2024-0132 / CVE-2025-23359: compat libraries that point at the host through /proc.
hostile "compat libcuda -> /proc/1/cwd" /usr/local/cuda/compat \
    "mkdir -p usr/local/cuda/compat && ln -s /proc/1/cwd$outside/lib/libcuda.so.1 usr/local/cuda/compat/libcuda.so.999.1.1 && ln -s libcuda.so.999.1.1 usr/local/cuda/compat/libcuda.so.1"
hostile "compat libcuda -> /proc/1/root/" /usr/local/cuda/compat \
    "mkdir -p usr/local/cuda/compat && ln -s /proc/1/root/ usr/local/cuda/compat/libcuda.so.999.1.1"
# CVE-2025-23267: the container's ld.so.cache linked at the host's.
hostile "ld.so.cache -> /proc/1/root/etc/ld.so.cache" /etc/ld.so.cache \
    "rm -f etc/ld.so.cache && ln -s /proc/1/root/etc/ld.so.cache etc/ld.so.cache"
# CVE-2025-23266: the image's environment loads a payload.
hostile "LD_PRELOAD=/proc/self/cwd/poc.so" / \
    "cp '$carry/poc/poc.so' ./poc.so && sed -i 's#\"NVIDIA_VISIBLE_DEVICES=all\"#\"NVIDIA_VISIBLE_DEVICES=all\", \"LD_PRELOAD=/proc/self/cwd/poc.so\", \"LD_AUDIT=$carry/poc/poc.so\", \"LD_LIBRARY_PATH=$carry/poc\"#' ../config.json"
# CVE-2024-0135/0136/0137: the image's ldconfig must never run.
hostile "image ldconfig" /sbin/ldconfig \
    "for f in sbin/ldconfig sbin/ldconfig.real usr/sbin/ldconfig; do mkdir -p \$(dirname \$f); rm -f \$f; printf '#!/bin/sh\ntouch $marker\n' >\$f; chmod 755 \$f; done"

# The rootfs's own mount: what the hook reads is a regular file on the image's own file
# system, so a link to procfs, sysfs or the runtime's /dev never blocks the start (reading
# /proc/kmsg would block and drain the host's kernel log) and the start ends in time.
for target in /proc/kmsg /proc/sys/kernel/hostname /sys/class /dev/zero; do
    hostile "ld.so.cache -> $target (never read)" /etc/ld.so.cache \
        "rm -f etc/ld.so.cache && ln -s $target etc/ld.so.cache"
done
hostile "compat -> /proc/self (never listed)" /usr/local/cuda/compat \
    "rm -rf usr/local/cuda/compat && mkdir -p usr/local/cuda && ln -s /proc/self usr/local/cuda/compat"
# Links from the image into a volume the spec mounts: the hook writes nothing there, and
# with a shared volume no mount of it propagates to the host and outlives the container.
volume=$work/volume
mkdir -p "$volume/fw" && echo sentinel >"$volume/host-secret"
volume_digest() { (cd "$volume" && find . -printf '%p %y %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
cat >"$work/add-volume.py" <<'PY'
import json, sys
config, source, propagation = sys.argv[1:4]
c = json.load(open(config))
c["mounts"].append({"destination": "/data", "type": "bind", "source": source,
                    "options": ["rbind", propagation]})
if propagation == "rshared":
    c["linux"]["rootfsPropagation"] = "shared"
json.dump(c, open(config, "w"), indent=1)
PY
mount --bind "$volume" "$volume" && mount --make-shared "$volume"
mounts_before=$(awk '{print $5}' /proc/self/mountinfo | sort)
volume_before=$(volume_digest)
for propagation in rprivate rshared; do
    for path in etc lib/firmware lib/firmware/nvidia/$version usr/bin usr/share/vulkan/icd.d; do
        hostile "/$path -> volume ($propagation)" "/$path" \
            "$(link "$path" /data) && python3 '$work/add-volume.py' ../config.json '$volume' $propagation"
        check "/$path -> volume ($propagation): the volume is unchanged" test "$(volume_digest)" = "$volume_before"
    done
done
# A forged state: its pid is a host process, whose mount namespace is the hook's own.
b=$(mktemp -d "$work/bundle.XXXXXX")
bundle "$b" NVIDIA_VISIBLE_DEVICES=all true >/dev/null
res=$(printf '{"ociVersion":"1.0.2","id":"forged","status":"creating","pid":%d,"bundle":"%s"}' $$ "$b" |
    timeout 60 "$carry/bin/nvc-hook" prestart 2>&1)
rc=$?
echo "--- forged state pid $$: rc $rc: $res"
check "forged state pid: refused" test "$rc" != 0
check "forged state pid: says why" grep -q "the hook's own mount namespace" <<<"$res"
check "forged state pid: the host is unchanged" host_unchanged

# CVE-2026-24260: a directory of the rootfs flips between a real directory and a link to
# the outside while containers start from that one rootfs.
echo; echo "--- race: /usr/lib/x86_64-linux-gnu flipping, $race_starts starts"
race=$work/race
bundle "$race" NVIDIA_VISIBLE_DEVICES=all 'echo started' >/dev/null
lib=$race/rootfs/usr/lib/x86_64-linux-gnu
ln -s "$outside" "$lib.link"
# renameat2(RENAME_EXCHANGE): the path is always there, a real directory one moment and a
# link to the outside the next.
python3 - "$lib" "$lib.link" <<'PY' &
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
PY
flipper=$!
ok=0 failed=0 silent=0
for i in $(seq "$race_starts"); do
    if res=$(cd "$race" && "$carry/bin/nvc-runtime" --root "$work/state" run "race$i" 2>&1); then
        ok=$((ok + 1))
    else
        failed=$((failed + 1))
        [ -z "$res" ] && silent=$((silent + 1))
    fi
    "$carry/runc/usr/sbin/runc" --root "$work/state" delete -f "race$i" >/dev/null 2>&1
done
kill "$flipper"; wait "$flipper" 2>/dev/null
echo "race: $ok started, $failed failed ($silent without a message)"
check "race: the host is unchanged after $race_starts starts" host_unchanged
check "race: every failure has a message" test "$silent" = 0

echo
check "the host's mount table is as before" test "$mounts_before" = "$(awk '{print $5}' /proc/self/mountinfo | sort)"
umount "$volume" 2>/dev/null
echo; [ $fail = 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $fail
