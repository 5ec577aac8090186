#!/usr/bin/env bash
# Discovery on the GPU machine: `nvc info` and `nvc list` against the real driver
# (files under /usr/local/nvidia, found through /etc/ld.so.cache), compared with
# nvidia-smi. Usage: tests/gpu/discovery.sh BIN_DIR [OUT_DIR]
set -uo pipefail
bin=${1:?usage: discovery.sh BIN_DIR [OUT_DIR]}
out=${2:-/tmp/nvc-gpu-discovery}
mkdir -p "$out"
export NVC_CONFIG="$out/config.toml"
printf '[log]\nfile = "%s/nvc.log"\nlevel = "debug"\n' "$out" >"$NVC_CONFIG"
smi=$(command -v nvidia-smi || echo /usr/local/nvidia/bin/nvidia-smi)

fail=0
step() { echo; echo "\$ $*"; "$@" 2>&1 | tee -a "$out/transcript.txt"; return "${PIPESTATUS[0]}"; }
{
    echo "host: $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    step "$smi" -L
    step "$smi" --query-gpu=index,uuid,pci.bus_id,driver_version,compute_cap --format=csv
    step "$bin/nvc" info || fail=1
    step "$bin/nvc" info --json || fail=1
    step "$bin/nvc" list || fail=1
    step "$bin/nvc" list --devices 0 --capabilities utility || fail=1
    step "$bin/nvc" list --devices none -c all --json >/dev/null || fail=1
} | tee "$out/report.txt"

# nvc's GPUs must be nvidia-smi's, in the same order.
want=$("$smi" --query-gpu=index,uuid,pci.bus_id --format=csv,noheader | awk -F', ' '{b=tolower($3); sub(/^0000/, "", b); print $1, $2, b}')
got=$("$bin/nvc" info --json | python3 -c 'import json,sys; [print(g["index"], g["uuid"], g["busId"]) for g in json.load(sys.stdin)["gpus"]]')
echo; echo "nvidia-smi: $want"; echo "nvc:        $got"
[ "$want" = "$got" ] && echo "GPU list matches nvidia-smi" || { echo "GPU list differs from nvidia-smi"; fail=1; }
exit $fail
