#!/usr/bin/env bash
# Where a GPU container's start spends its time, for two hooks side by side: the hook in
# .device-carry/bin and the one in .device-carry/old, each behind a wrapper that records
# its own wall time, alternated ROUNDS times through nvc-runtime and runc on fresh copies
# of the small rootfs (writable, all GPUs, utility,compute); and the medians of the
# whole start, the hook, and the rest. Needs .device-carry/ (prepare.sh).
# Usage: tests/gpu/trace-start.sh OUT_DIR [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: trace-start.sh OUT_DIR [ROUNDS]}
rounds=${2:-20}
work=$(mktemp -d /tmp/nvc-trace.XXXXXX)
mkdir -p "$out"
check() { :; }
. tests/gpu/common.sh >/dev/null
for v in new old; do
    hook=$carry/bin/nvc-hook; [ $v = old ] && hook=$carry/old/nvc-hook
    cat >"$work/hook-$v" <<SH
#!/bin/bash
s=\$EPOCHREALTIME; $hook "\$@"; rc=\$?; e=\$EPOCHREALTIME
echo "\$s \$e" >>$work/times-$v; exit \$rc
SH
    chmod +x "$work/hook-$v"
    sed "s#^path = .*nvc-hook\"#path = \"$work/hook-$v\"#" "$work/config.toml" >"$work/config-$v.toml"
    grep -q "hook-$v" "$work/config-$v.toml" || { echo "no hook path in the config"; exit 1; }
done
start() { # start VERSION N: one container, prints its wall ms
    local b=$work/b-$1-$2 s e
    bundle "$b" 'NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=utility,compute' true >/dev/null
    python3 - "$b/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["root"]["readonly"] = False
json.dump(c, open(sys.argv[1], "w"))
PY
    s=$EPOCHREALTIME
    (cd "$b" && NVC_CONFIG=$work/config-$1.toml "$carry/bin/nvc-runtime" --root "$work/state" run "c-$1-$2" >/dev/null 2>"$b/err") || cat "$b/err"
    e=$EPOCHREALTIME
    echo "$s $e" >>"$work/starts-$1"
    rm -rf "$b"
}
for i in $(seq "$rounds"); do
    if [ $((i % 2)) = 1 ]; then start old "$i"; start new "$i"; else start new "$i"; start old "$i"; fi
done
python3 - "$work" <<'PY'
import statistics, sys
w = sys.argv[1]
def ms(f):
    return [(float(e) - float(s)) * 1e3 for s, e in (l.split() for l in open(f"{w}/{f}"))]
for v in ["old", "new"]:
    st, hk = ms(f"starts-{v}"), ms(f"times-{v}")
    print(f"{v}: start median {statistics.median(st):.2f} ms, hook median {statistics.median(hk):.2f} ms, start - hook {statistics.median(st) - statistics.median(hk):.2f} ms ({len(st)} starts)")
PY
