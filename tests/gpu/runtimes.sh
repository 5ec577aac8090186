#!/usr/bin/env bash
# The runc end-to-end checks (e2e.sh, under nvc-runtime) and the CDI checks (cdi.sh, the
# CDI hooks run by the runtime itself) with other low-level runtimes, on
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
    # crun 1.21 makes a read-only rootfs read-only before it runs the createContainer
    # hooks (later crun and runc do it after): its CDI containers get a writable rootfs,
    # and a read-only one must fail saying so.
    rw=0; [ "$name" = crun-1.21 ] && rw=1
    for suite in e2e cdi; do
        NVC_GPU_RW_ROOTFS=$([ $suite = cdi ] && echo $rw) NVC_GPU_RUNTIME=$wrapper \
            bash tests/gpu/$suite.sh "$out/$suite-$name" >"$out/$suite-$name.txt" 2>&1 || status=1
        echo "  $suite: $(grep -c '^PASS' "$out/$suite-$name.txt") passed, $(grep -c '^FAIL' "$out/$suite-$name.txt") failed"
        grep '^FAIL' "$out/$suite-$name.txt"
    done
    if [ $rw = 1 ]; then
        NVC_GPU_RUNTIME=$wrapper bash tests/gpu/cdi.sh "$out/cdi-ro-$name" >"$out/cdi-ro-$name.txt" 2>&1
        if grep -q 'made it so before running the createContainer hooks' "$out/cdi-ro-$name.txt"; then
            echo "  PASS cdi with a read-only rootfs: refused, saying the runtime made it read-only too early"
        else
            echo "  FAIL cdi with a read-only rootfs: no message naming the early read-only remount"; status=1
        fi
    fi
done
exit $status
