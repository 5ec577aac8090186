#!/usr/bin/env bash
# Which container uses which GPU, and GPU health, on the GPU machine's real driver: a CUDA
# process (cuda-hold, tests/gpu/cuda-hold.c) in a runc container started through nvc's
# runtime holds 1 GiB of GPU 0; `nvc ps` names its container (the id runc was given), its
# pid inside and its memory, `nvc top` prints it frame by frame, and once the container is
# gone it is no longer listed. Then `nvc health update` writes the health record from the
# real NVML; `nvc health show`, `nvc info` and `nvc check` show each GPU's health; a
# container asking for all GPUs gets every healthy one.
# Needs what tests/gpu/prepare.sh packs into .device-carry/check.
# Usage: tests/gpu/top.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: top.sh OUT_DIR}
mkdir -p "$out"
carry=$PWD/.device-carry
if [ -s "$carry/check/pack.tar.xz" ]; then
    rm -rf "$carry"/{bin,runc,poc,bench,prev,commit}
    xz -dc "$carry/check/pack.tar.xz" | tar -C "$carry" -xf - || { echo "FAIL unpack"; exit 1; }
    rm -f "$carry/check/pack.tar.xz"
fi
work=$(mktemp -d /tmp/nvc-top.XXXXXX)
. tests/gpu/common.sh
nvc=$carry/bin/nvc
cp "$carry/poc/cuda-hold" "$rootfs/bin/cuda-hold"

# The CUDA container, in the background.
id=nvc-top-$$
b=$work/bundle-hold
bundle "$b" "NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=compute,utility" "exec cuda-hold 1024 120" >/dev/null
(cd "$b" && exec "$carry/bin/nvc-runtime" --root "$work/state" run "$id" >"$out/hold.out" 2>&1) &
runner=$!
for _ in $(seq 120); do grep -q holding "$out/hold.out" 2>/dev/null && break; sleep 0.5; done
check "the CUDA container holds GPU memory" grep -q "holding 1024 MiB" "$out/hold.out"
cat "$out/hold.out"

echo '$ nvc ps'
"$nvc" ps | tee "$out/ps.txt"
"$nvc" ps --json >"$out/ps.json"
check "nvc ps names the container" grep -q "$id" "$out/ps.txt"
check "nvc ps --json: the container's process, its pid inside and at least 1 GiB" python3 - "$out/ps.json" "$id" <<'PY'
import json, sys
report, want = json.load(open(sys.argv[1])), sys.argv[2]
found = [p for g in report["gpus"] for p in g["processes"]
         if (p.get("container") or {}).get("id") == want]
for p in found:
    print(f"pid {p['pid']} (inside: {p.get('containerPid')}) {p.get('command')} "
          f"{(p.get('usedMemory') or 0) >> 20} MiB, owner {p['owner']}, recorded {p['container']['recorded']}")
ok = any(p["owner"] == "container" and (p.get("usedMemory") or 0) >= 1024 << 20
         and p.get("containerPid") is not None for p in found)
sys.exit(0 if ok else 1)
PY
echo '$ nvc top -n 2 -d 1'
"$nvc" top -n 2 -d 1 | tee "$out/top.txt"
check "nvc top shows the container in two frames" test "$(grep -c "$id" "$out/top.txt")" -ge 2

"$carry/bin/nvc-runtime" --root "$work/state" kill "$id" KILL 2>/dev/null
wait "$runner"
"$carry/bin/nvc-runtime" --root "$work/state" delete -f "$id" 2>/dev/null
for _ in $(seq 20); do "$nvc" ps --json >"$out/ps-after.json"; grep -q "$id" "$out/ps-after.json" || break; sleep 0.5; done
check "the ended container is no longer listed" sh -c "! grep -q '$id' '$out/ps-after.json'"

# Health, from the real NVML.
echo '$ nvc health update'
"$nvc" health update 2>&1 | tee "$out/health-update.txt"
echo '$ nvc health'
"$nvc" health show | tee "$out/health.txt"
"$nvc" health show --json >"$out/health.json"
check "the record is current and every GPU healthy" python3 - "$out/health.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
print(json.dumps({k: h[k] for k in ("current", "age", "ignored", "check")}))
sys.exit(0 if h["current"] and h["gpus"] and all(g["healthy"] for g in h["gpus"]) else 1)
PY
echo '$ nvc info'
"$nvc" info | tee "$out/info.txt"
echo '$ nvc check'
"$nvc" check >"$out/check.txt" 2>&1
cat "$out/check.txt"
check "nvc check shows the GPUs' health" grep -qi "health" "$out/check.txt"
gpus=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["gpus"]))' "$out/health.json")
inside=$(ctr "NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=utility" "ls /dev | grep -c '^nvidia[0-9]'" | tail -1)
echo "GPUs: $gpus; a container asking for all has $inside"
check "a container asking for all gets every healthy GPU" test "$inside" = "$gpus"

rm -rf "$work"
[ "$fail" = 0 ] && echo "top: all checks passed" || echo "top: FAILED"
exit "$fail"
