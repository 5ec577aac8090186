#!/usr/bin/env bash
# Where nvc-hook's time goes on the real driver: strace -c -w (wall time per system call)
# of the prestart and poststop hooks of GPU containers (all GPUs, utility,compute, a
# writable rootfs) started through nvc-runtime and runc; the first start fills the
# driver-files cache, the summaries are of the third. Needs .device-carry/ (prepare.sh)
# and strace. Usage: tests/gpu/profile-hook.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: profile-hook.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-profile.XXXXXX)
. tests/gpu/common.sh >/dev/null
command -v strace >/dev/null || { echo "strace is not installed here"; exit 1; }
cat >"$work/hook" <<SH
#!/bin/bash
exec strace -f -c -w -o "$work/strace.\$1.\$\$" -- "$carry/bin/nvc-hook" "\$@"
SH
chmod +x "$work/hook"
sed "s#^path = .*nvc-hook\"#path = \"$work/hook\"#" "$work/config.toml" >"$work/config-strace.toml"
for n in 1 2 3; do
    rm -f "$work"/strace.*
    b=$work/b$n
    bundle "$b" 'NVIDIA_VISIBLE_DEVICES=all;NVIDIA_DRIVER_CAPABILITIES=utility,compute' true >/dev/null
    python3 - "$b/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["root"]["readonly"] = False
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
    (cd "$b" && NVC_CONFIG=$work/config-strace.toml "$carry/bin/nvc-runtime" --root "$work/state" run "c$n") >/dev/null 2>&1
done
for f in "$work"/strace.prestart.* "$work"/strace.poststop.*; do
    echo "=== $(basename "$f" | cut -d. -f2), the third start"
    head -30 "$f"
done | tee "$out/profile-hook.txt"
