#!/usr/bin/env bash
# The runc end-to-end checks (e2e.sh) with other low-level runtimes under nvc-runtime, on
# the GPU machine's cgroup v2: Debian 13's crun 1.21, Debian 14's crun 1.28 and runc 1.3
# (tests/gpu/prepare.sh carries them with their libyajl and libseccomp). crun cannot run
# on the development machines' hybrid cgroups; here it runs as users run it.
# Usage: tests/gpu/runtimes.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: runtimes.sh OUT_DIR}
mkdir -p "$out"
status=0
for name in crun-1.21 crun-1.28 runc-1.3; do
    dir=$carry/runtimes/$name
    bin=$(ls "$dir"/crun "$dir"/runc 2>/dev/null | head -1)
    if [ -z "$bin" ]; then
        echo "FAIL $name: not carried (run tests/gpu/prepare.sh)"; status=1; continue
    fi
    # A wrapper that finds the carried libraries: nvc-runtime execs it as the runtime.
    wrapper=$(mktemp /tmp/nvc-runtime-$name.XXXXXX)
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$dir/lib" "$bin" >"$wrapper"
    chmod 0755 "$wrapper"
    echo "=== $name: $("$wrapper" --version | head -1)"
    NVC_GPU_RUNTIME=$wrapper bash tests/gpu/e2e.sh "$out/$name" >"$out/e2e-$name.txt" 2>&1 || status=1
    grep -oE '^(PASS|FAIL)' "$out/e2e-$name.txt" | sort | uniq -c | awk '{print "  " $2, $1}'
    grep '^FAIL' "$out/e2e-$name.txt"
    tail -n 1 "$out/e2e-$name.txt"
done
exit $status
