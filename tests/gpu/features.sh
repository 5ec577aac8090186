#!/usr/bin/env bash
# What NVIDIA's toolkit does not do, on the GPU machine's real driver under real runc:
# an exclusive GPU refusing a second container (and freed when its holder ends), `nvc
# attach` making a GPU usable (nvidia-smi -L, a CUDA kernel) in a container started
# without one and `nvc detach` taking it back, a GPU container's rootfs left as it
# was once the container has ended, and holding no empty driver file while it runs. Needs what tests/gpu/prepare.sh gathered in
# .device-carry/ (bin/nvc among it).
# Usage: tests/gpu/features.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:-/tmp/nvc-features}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-features.XXXXXX)

. tests/gpu/common.sh

host_l=$(nvidia-smi -L)
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
state=$work/state
nvcrt() { "$carry/bin/nvc-runtime" --root "$state" "$@"; }
# The CUDA program in the rootfs every bundle copies (the CUDA runtime linked statically).
mkdir -p "$rootfs/usr/bin" && ln -sf busybox "$rootfs/bin/sleep"
/usr/local/cuda/bin/nvcc -O2 -cudart static -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_90,code=compute_90 -o "$rootfs/usr/bin/vadd" tests/gpu/vadd.cu &&
    for lib in $(ldd "$rootfs/usr/bin/vadd" | awk '/=> \// {print $3}'); do
        [ -e "$rootfs/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || cp -L "$lib" "$rootfs/usr/lib/x86_64-linux-gnu/"
    done
ldconfig -r "$rootfs"
check "nvcc builds the CUDA program" test -x "$rootfs/usr/bin/vadd"
long() { # long ID ENV: a container of ID running sleep, created and started through nvc-runtime
    local b=$work/$1
    bundle "$b" "$2" 'sleep 300' >/dev/null
    # Its output not to ours: a command substitution would wait for the sleep.
    (cd "$b" && nvcrt create "$1" >"$work/$1.out" 2>&1 </dev/null && nvcrt start "$1") 2>&1
    cat "$work/$1.out"
}
# Whatever runs at the end goes: a holder left running would keep the GPU from every
# script after this one.
cleanup() {
    for id in holder plain live; do
        runc --root "$state" kill "$id" KILL >/dev/null 2>&1
        sleep 0.2
        runc --root "$state" delete --force "$id" >/dev/null 2>&1
    done
}
trap cleanup EXIT
end() { nvcrt kill "$1" KILL >/dev/null 2>&1; sleep 0.5; nvcrt delete --force "$1" >/dev/null 2>&1; }
writable() { # writable BUNDLE: its rootfs read-write, as engines give it
    python3 - "$1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["root"]["readonly"] = False
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
}

echo "--- exclusive GPUs"
a=$(long holder "NVIDIA_VISIBLE_DEVICES=all;NVC_EXCLUSIVE=1"); echo "$a"
check "an exclusive container starts" grep -q running <<<"$(nvcrt state holder)"
second=$(ctr NVIDIA_VISIBLE_DEVICES=0 'nvidia-smi -L'); echo "$second"
check "a second container asking for the GPU is refused" test -z "$(grep '^GPU ' <<<"$second")"
check "the refusal names the holder" grep -q "held exclusively by container holder" <<<"$second"
leases=$("$carry/bin/nvc" list --leases 2>&1); echo "$leases"
check "nvc list --leases shows the holder" grep -q holder <<<"$leases"
end holder
third=$(ctr NVIDIA_VISIBLE_DEVICES=0 'nvidia-smi -L'); echo "$third"
check "once the holder is killed, the GPU is free" test "$(grep '^GPU ' <<<"$third")" = "$host_l"

echo; echo "--- nvc attach and detach"
b=$work/plain
bundle "$b" "" 'sleep 300' >/dev/null && writable "$b"
(cd "$b" && runc --root "$state" create plain >/dev/null 2>&1 </dev/null && runc --root "$state" start plain) 2>&1
before=$(runc --root "$state" exec plain sh -c 'ls /dev/nvidia0 2>&1; nvidia-smi -L 2>&1 | head -1')
echo "$before"
check "a container started without nvc has no GPU" grep -q 'No such file' <<<"$before"
attach=$("$carry/bin/nvc" attach --root "$state" --runtime /usr/local/sbin/runc plain --gpus "$uuid" 2>&1); echo "$attach"
after=$(runc --root "$state" exec plain sh -c 'nvidia-smi -L; vadd' 2>&1); echo "$after"
check "after nvc attach: nvidia-smi -L inside equals the host's" test "$(grep '^GPU ' <<<"$after")" = "$host_l"
check "after nvc attach: the CUDA vector add and matmul are right" grep -q 'result=OK' <<<"$after"
shown=$(runc --root "$state" exec plain sh -c 'ls /proc/driver/nvidia/gpus | wc -l; grep ModifyDeviceFiles /proc/driver/nvidia/params'); echo "$shown"
check "after nvc attach: /proc/driver/nvidia shows its GPU, device files not modifiable" \
    eval 'test "$(head -1 <<<"$shown")" = 1 && grep -q "ModifyDeviceFiles: 0" <<<"$shown"'
detach=$("$carry/bin/nvc" detach --root "$state" --runtime /usr/local/sbin/runc plain --gpus "$uuid" 2>&1); echo "$detach"
gone=$(runc --root "$state" exec plain sh -c 'ls /dev/nvidia0 2>&1; vadd 2>&1 | tail -1; echo folders=$(ls /proc/driver/nvidia/gpus | wc -l)'); echo "$gone"
check "after nvc detach: the GPU's node is gone and CUDA finds no GPU" \
    eval 'grep -q "No such file" <<<"$gone" && ! grep -q "result=OK" <<<"$gone"'
check "after nvc detach: /proc/driver/nvidia shows no GPU folder" grep -q 'folders=0' <<<"$gone"
runc --root "$state" kill plain KILL >/dev/null 2>&1; sleep 0.5; runc --root "$state" delete --force plain >/dev/null 2>&1

echo; echo "--- no trace: a GPU container's writable rootfs, before and after"
# (CUDA_CACHE_DISABLE: CUDA's own kernel cache in ~/.nv is the program's doing, not nvc's.)
t=$work/trace
bundle "$t" "NVIDIA_VISIBLE_DEVICES=all;CUDA_CACHE_DISABLE=1" 'nvidia-smi -L; vadd' >/dev/null && writable "$t"
# Every path with its type, a file's size, a link's target (a folder's size on disk does
# not shrink back), and the cache's digest.
listing() { (cd "$t/rootfs" && find . \( -type f -printf '%p f %s\n' \) -o \( ! -type f -printf '%p %y %l\n' \) | sort; sha256sum etc/ld.so.cache 2>/dev/null); }
listing >"$work/before"
ran=$(cd "$t" && nvcrt run trace 2>&1); echo "$ran"
check "the GPU container ran (nvidia-smi and CUDA)" eval 'grep -q "^GPU " <<<"$ran" && grep -q result=OK <<<"$ran"'
listing >"$work/after"
diff "$work/before" "$work/after" && echo "(no difference)"
check "after it ended, its rootfs is as it was (files, links, ld.so.cache)" cmp -s "$work/before" "$work/after"

echo; echo "--- a running GPU container's rootfs: what a docker commit of it would read"
r=$work/live
bundle "$r" "NVIDIA_VISIBLE_DEVICES=all" 'sleep 300' >/dev/null && writable "$r"
(cd "$r" && nvcrt create live >/dev/null 2>&1 </dev/null && nvcrt start live) 2>&1
inside=$(runc --root "$state" exec live sh -c 'nvidia-smi -L; CUDA_CACHE_DISABLE=1 vadd; readlink -f /usr/lib/x86_64-linux-gnu/libcuda.so.1' 2>&1); echo "$inside"
check "a running GPU container: nvidia-smi and CUDA work through the links to /dev/.nvc" \
    eval 'grep -q "^GPU " <<<"$inside" && grep -q result=OK <<<"$inside" && grep -q "^/dev/.nvc/" <<<"$inside"'
empty=$(cd "$r/rootfs" && find . -type f -size 0 \( -name '*nvidia*' -o -name 'libcuda*' -o -name 'gsp_*' \)); echo "empty driver files in its rootfs: ${empty:-none}"
check "while it runs, its rootfs holds no empty driver file" test -z "$empty"
end live

echo; echo "--- no trace after nvc attach: a container that runs nvc-hook at both stages (hooks.d) and asks for no GPU"
h=$work/hooked
bundle "$h" "" 'sleep 300' >/dev/null && writable "$h"
python3 - "$h/config.json" "$carry/bin/nvc-hook" "$NVC_CONFIG" <<'PY'
import json, sys
path, hook, config = sys.argv[1:]
c = json.load(open(path))
entry = lambda stage: {"path": hook, "args": ["nvc-hook", stage],
                       "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NVC_CONFIG=" + config]}
c["hooks"] = {"prestart": [entry("prestart")], "poststop": [entry("poststop")]}
json.dump(c, open(path, "w"), indent=1)
PY
t=$h
listing >"$work/hooked-before"
(cd "$h" && runc --root "$state" create hooked >/dev/null 2>&1 </dev/null && runc --root "$state" start hooked) 2>&1
attach=$("$carry/bin/nvc" attach --root "$state" --runtime /usr/local/sbin/runc hooked --gpus "$uuid" 2>&1); echo "$attach"
inside=$(runc --root "$state" exec hooked sh -c 'nvidia-smi -L; CUDA_CACHE_DISABLE=1 vadd' 2>&1); echo "$inside"
check "attached to a hooks.d container: nvidia-smi and CUDA work" eval 'grep -q "^GPU " <<<"$inside" && grep -q result=OK <<<"$inside"'
runc --root "$state" kill hooked KILL >/dev/null 2>&1; sleep 0.5; runc --root "$state" delete --force hooked 2>&1
listing >"$work/hooked-after"
diff "$work/hooked-before" "$work/hooked-after" && echo "(no difference)"
check "after it ended, what nvc attach made is gone (files, links, ld.so.cache)" cmp -s "$work/hooked-before" "$work/hooked-after"

# Every container above has ended: the host's state folder (the default /run/nvc) keeps
# no record, rootfs folder or lock of theirs.
left=$(find /run/nvc/rootfs -mindepth 1 2>/dev/null); echo "$left"
check "the state folder keeps nothing of the containers that ended" test -z "$left"
check "the hooks bounded their capabilities, phase by phase" \
    grep -q "privileges: phase rootfs: effective cap_dac_override,cap_sys_admin" "$out/nvc.log"

cp "$out/nvc.log" "$out/nvc-features.log" 2>/dev/null
echo; [ $fail = 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $fail
