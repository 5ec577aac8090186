#!/usr/bin/env bash
# Where the hook's time goes inside the benchmark: a short nvc-bench run with nvc's log at
# debug level (--debug-log), then the median of each prestart phase per kind of run
# (`start`: a container start through runc, `hook`: the hook alone in the bench's own
# namespace), to compare the hook alone with the hook of a real container start.
# Needs .device-carry/ (prepare.sh). Usage: tests/gpu/bench-phases.sh OUT_DIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: bench-phases.sh OUT_DIR [RUNS]}
runs=${2:-20}
mkdir -p "$out"
. tests/gpu/install-runc.sh
work=$(mktemp -d /tmp/nvc-bench-phases.XXXXXX)
rmdir "$work"
"$carry/bin/nvc-bench" --real --rootfs "$carry/bench/rootfs" --runc /usr/local/sbin/runc \
    --runs "$runs" --gpus none --libs 0 --parallel 0 --debug-log --work "$work" \
    --out "$out/bench-debug.md" >"$out/bench-debug.log" 2>&1 || { tail -20 "$out/bench-debug.log"; exit 1; }
python3 - "$work/nvc.log" <<'PY' | tee "$out/bench-phases.txt"
import re, statistics, sys
kind_of, rows = {}, {}
for line in open(sys.argv[1]):
    m = re.search(r"nvc-hook \[(\d+)\] DEBUG: prestart of container \S+ in (\S+)", line)
    if m:
        kind_of[m.group(1)] = m.group(2).rstrip("/").split("/")[-1].split("-")[0]
        continue
    m = re.search(r"nvc-hook \[(\d+)\] DEBUG: (prestart|set up) phases ms: (.*)", line)
    if m and m.group(1) in kind_of:
        fields = m.group(3).split()
        table = rows.setdefault((kind_of[m.group(1)], m.group(2)), {})
        for name, ms in zip(fields[::2], fields[1::2]):
            table.setdefault(name, []).append(float(ms))
for (kind, what), names in sorted(rows.items()):
    n = len(names.get("total", []))
    cells = " ".join(f"{k} {statistics.median(v):.3f}" for k, v in names.items())
    print(f"{kind} ({n} runs) {what}: {cells}")
PY
grep -A8 '#### The parts alone' "$out/bench-debug.md" | grep '^|'
