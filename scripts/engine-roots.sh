#!/usr/bin/env bash
# Makes the Debian roots with newer engines that the engine tests run in
# (tests/src/engines/debian_root.rs): Debian 13 (trixie) and Debian 14 (forky), each by
# debootstrap, once per machine, and prints each root's path on a line of stdout.
#
#   scripts/engine-roots.sh [SUITE...]    (default: trixie forky)
#
# The roots are kept under $NVC_ENGINE_ROOTS (default $NVC_TESTS_CACHE/engine-roots, and
# NVC_TESTS_CACHE defaults to /var/cache/nvc-tests), about 900 MB each. A root made with
# another package list, or one half made by a run that was killed, is made anew. One
# maker a root at a time: a second caller (another test binary, scripts/test.sh making
# them while cargo builds) waits on the root's lock and finds it made. Needs root and
# the Debian mirror.
set -euo pipefail

# The engines each root holds (with `uidmap`, whose `newuidmap` rootless podman needs).
PACKAGES=podman,runc,crun,conmon,catatonit,uidmap,docker.io,docker-cli,containerd,tini
MIRROR=http://deb.debian.org/debian
# The file in a root that names the packages it was made with.
MADE_WITH=.nvc-engine-root

roots=${NVC_ENGINE_ROOTS:-${NVC_TESTS_CACHE:-/var/cache/nvc-tests}/engine-roots}

fail() {
    echo "engine-roots: $*" >&2
    exit 1
}

[ $# -gt 0 ] || set -- trixie forky
for suite in "$@"; do
    # This machine's debootstrap may predate the suite: sid's script makes any newer one.
    case "$suite" in
        trixie) script=trixie ;;
        forky) script=sid ;;
        *) fail "unknown suite $suite (trixie or forky)" ;;
    esac
    path=$roots/$suite
    mkdir -p "$roots" || fail "cannot make $roots (run as root, or set NVC_ENGINE_ROOTS)"
    exec 9>"$roots/.$suite.lock"
    flock 9
    if [ "$(cat "$path/$MADE_WITH" 2>/dev/null)" != "$PACKAGES" ]; then
        debootstrap=$(PATH=$PATH:/usr/sbin:/sbin command -v debootstrap) ||
            fail "debootstrap is missing (scripts/deps.sh installs it)"
        rm -rf "$path" "$path.partial"
        mkdir -p "$path.partial"
        echo "engine-roots: making $path (Debian $suite, about 900 MB from $MIRROR)" >&2
        start=$SECONDS
        log=$roots/.$suite.log
        timeout 900 "$debootstrap" --variant=minbase --include="$PACKAGES" "$suite" \
            "$path.partial" "$MIRROR" "/usr/share/debootstrap/scripts/$script" >"$log" 2>&1 || {
            tail -n 20 "$log" >&2
            fail "debootstrap of $suite failed (above: the end of $log)"
        }
        printf '%s' "$PACKAGES" >"$path.partial/$MADE_WITH"
        mv "$path.partial" "$path"
        echo "engine-roots: made $path in $((SECONDS - start)) s" >&2
    fi
    exec 9>&-
    echo "$path"
done
