#!/usr/bin/env bash
# The CDI path on the GPU machine's real driver: `nvc cdi generate`, the spec's edits
# applied to runc bundles the way CDI's own library applies them for Podman and
# containerd (env, device nodes with their cgroup rules, mounts, hooks), and real runc.
# Checks what only a real /proc/driver/nvidia shows: the spec's cdi-setup hook's mask
# leaves each container its own GPUs' folders and ModifyDeviceFiles 0, and the same
# container without that hook sees every GPU (so the check can fail). Needs what
# tests/gpu/prepare.sh gathers in .device-carry/.
# Usage: tests/gpu/cdi.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:-/tmp/nvc-cdi}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-cdi.XXXXXX)

. tests/gpu/common.sh

mounts_before=$(awk '{print $5}' /proc/self/mountinfo | sort)
spec=$work/nvidia.json
"$carry/bin/nvc" cdi generate --output "$spec" || { echo "FAIL nvc cdi generate"; exit 1; }
echo "\$ nvc cdi list --spec $spec"; "$carry/bin/nvc" cdi list --spec "$spec"
echo "the spec's mask hook: $(python3 -c 'import json,sys; print([h["args"] for h in json.load(open(sys.argv[1]))["containerEdits"]["hooks"] if h["args"][1] in ("cdi-setup", "cdi-mask-proc")])' "$spec")"

cdi_ctr() { # cdi_ctr DEVICE with|without SCRIPT: a runc container with the spec's edits
    local b; b=$(mktemp -d "$work/bundle.XXXXXX")
    bundle "$b" "" "$3" >/dev/null
    python3 - "$spec" "$b/config.json" "$1" "$2" <<'PY'
import json, sys
spec, config, device, mask = sys.argv[1:5]
spec = json.load(open(spec))
c = json.load(open(config))
edits = [spec["containerEdits"]] + [d["containerEdits"] for d in spec["devices"] if d["name"] == device]
assert len(edits) == 2, f"no device {device}"
linux = c.setdefault("linux", {})
for e in edits:
    c["process"]["env"] += e.get("env", [])
    for n in e.get("deviceNodes", []):
        linux.setdefault("devices", []).append(
            {k: n[k] for k in ("path", "type", "major", "minor", "fileMode", "uid", "gid") if k in n})
        linux.setdefault("resources", {}).setdefault("devices", []).append(
            {"allow": True, "type": "c", "major": n["major"], "minor": n["minor"], "access": "rwm"})
    for m in e.get("mounts", []):
        c["mounts"].append({"destination": m["containerPath"], "source": m["hostPath"],
                            "type": "bind", "options": m.get("options", [])})
    for h in e.get("hooks", []):
        args = list(h["args"])
        if mask == "without":
            if args[1] == "cdi-mask-proc":
                continue
            if args[1] == "cdi-setup" and "--proc-root" in args:
                at = args.index("--proc-root")
                del args[at:at + 2]
        c.setdefault("hooks", {}).setdefault(h["hookName"], []).append(
            {"path": h["path"], "args": args, "env": h.get("env", [])})
# crun writes its hooks' stderr only where this names (runc ignores it).
c.setdefault("annotations", {})["run.oci.hooks.stderr"] = "/dev/stderr"
json.dump(c, open(config, "w"), indent=1)
PY
    (cd "$b" && "$runtime" --root "$work/state" run "$(basename "$b")") 2>&1
}

probe='echo gpus: $(ls /proc/driver/nvidia/gpus); grep ModifyDeviceFiles /proc/driver/nvidia/params; nvidia-smi -L'
buses=$(ls /proc/driver/nvidia/gpus | sort)
host_modify=$(grep ModifyDeviceFiles /proc/driver/nvidia/params)
echo "host: gpus: $(echo $buses); $host_modify"
mapfile -t host_l < <(nvidia-smi -L)
i=0
for bus in $buses; do
    echo; echo "--- nvidia.com/gpu=$i ($bus)"
    got=$(cdi_ctr "$i" with "$probe"); echo "$got"
    check "gpu=$i: /proc/driver/nvidia/gpus shows $bus alone" grep -qx "gpus: $bus" <<<"$got"
    check "gpu=$i: ModifyDeviceFiles is 0 inside" grep -qx 'ModifyDeviceFiles: 0' <<<"$got"
    uuid=$(grep -o 'UUID: GPU-[0-9a-f-]*' <<<"${host_l[$i]}")
    check "gpu=$i: nvidia-smi -L inside lists its GPU ($uuid) alone" \
        test "$(grep -c '^GPU ' <<<"$got")-$(grep -c "$uuid" <<<"$got")" = 1-1
    i=$((i + 1))
done

echo; echo "--- nvidia.com/gpu=all"
got=$(cdi_ctr all with "$probe"); echo "$got"
check "all: /proc/driver/nvidia/gpus shows every GPU" grep -qx "gpus: $(echo $buses)" <<<"$got"
check "all: ModifyDeviceFiles is 0 inside" grep -qx 'ModifyDeviceFiles: 0' <<<"$got"

echo; echo "--- nvidia.com/gpu=0 without the spec's mask (--proc-root; what the check tells apart)"
got=$(cdi_ctr 0 without "$probe"); echo "$got"
check "without the hook: the host's params ($host_modify)" grep -qx "$host_modify" <<<"$got"
check "without the hook: every GPU's folder" grep -qx "gpus: $(echo $buses)" <<<"$got"

mounts_after=$(awk '{print $5}' /proc/self/mountinfo | sort)
check "the host's mount table is as it was" test "$mounts_before" = "$mounts_after"
echo; [ "$fail" = 0 ] && echo "cdi: all checks passed" || echo "cdi: some checks FAILED"
exit "$fail"
