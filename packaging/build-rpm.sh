#!/usr/bin/env bash
# Builds the nvc RPM: release binaries, then an RPM made by rpmbuild from
# packaging/rpm/nvc.spec, with the same files as the .deb (packaging/payload.sh stages
# both) and scriptlets that do what the .deb's maintainer scripts do.
#
#   packaging/build-rpm.sh [--arch x86_64|aarch64] [--bin-dir DIR] [--help-from NVC]
#                          [--release N] [--xz-level N] [--out DIR]
#
# --arch ARCH      the package's architecture (default: this machine's); the binaries
#                  must be for it
# --bin-dir DIR    package the nvc, nvc-runtime, nvc-hook, nvc-cuda-version and
#                  nvc-mig-devices already
#                  built in DIR (the tests package their debug build); without it, this
#                  machine's architecture is built (`cargo build --release`), and aarch64
#                  is cross-built (scripts/cross-aarch64.sh --release)
# --help-from NVC  an nvc of the same version that runs here, for the --help text in
#                  nvc.txt when the packaged one cannot run here (another architecture)
# --release N      the RPM's release (default 1): a rebuild of the same version
# --xz-level N     how hard xz compresses (0-9, default 6, as dpkg-deb does): the tests take
#                  0, which packs their debug build in a tenth of the time
# --out DIR        where the RPM goes (default target/rpm)
#
# Prints the path of the RPM on its last line. Needs rpmbuild (apt-get install rpm),
# readelf and strip (binutils; binutils-aarch64-linux-gnu for aarch64 elsewhere); runs as
# any user (file owners in the package are root through the spec's %defattr).
set -euo pipefail

# shellcheck source=packaging/payload.sh
. "$(dirname "$0")/payload.sh"
repo="$nvc_repo"
bin_dir=""
help_from=""
arch="$(uname -m)"
release=1
xz_level=6
out_dir="$repo/target/rpm"
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch="${2:?--arch needs x86_64 or aarch64}"; shift 2 ;;
        --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --help-from) help_from="${2:?--help-from needs a program}"; shift 2 ;;
        --release) release="${2:?--release needs a number}"; shift 2 ;;
        --xz-level) xz_level="${2:?--xz-level needs 0 to 9}"; shift 2 ;;
        --out) out_dir="${2:?--out needs a directory}"; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
        *) echo "build-rpm.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v rpmbuild >/dev/null || nvc_die "rpmbuild is missing (apt-get install rpm)"
case "$arch" in
    x86_64|aarch64) ;;
    *) nvc_die "--arch is x86_64 or aarch64, not $arch" ;;
esac
case "$release" in
    ''|*[!0-9a-z.]*) nvc_die "--release is a number such as 2, not $release" ;;
esac
case "$xz_level" in
    [0-9]) ;;
    *) nvc_die "--xz-level is 0 to 9, not $xz_level" ;;
esac
version="$(nvc_version)"
[ -n "$bin_dir" ] || bin_dir="$(nvc_bin_dir "$arch")"
bin_dir="$(cd "$bin_dir" && pwd)"

mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
stage="$(mktemp -d "$out_dir/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
nvc_stage "$stage/root" "$bin_dir" "$arch" "$help_from"

# The scriptlets: the RPM's own head (what rpm's $1 means), then for preun and postun the
# .deb's prerm and postrm, which it calls as `remove` and `purge`.
scripts="$stage/scripts"
mkdir -p "$scripts"
cp "$repo/packaging/rpm/post" "$scripts/post"
{ cat "$repo/packaging/rpm/preun"; sed 1d "$repo/packaging/deb/prerm"; } >"$scripts/preun"
{ cat "$repo/packaging/rpm/postun"; sed 1d "$repo/packaging/deb/postrm"; } >"$scripts/postun"

rpmbuild -bb --quiet --target "$arch-linux" \
    --define "_topdir $stage/rpmbuild" \
    --define "_rpmdir $out_dir" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    --define "nvc_version $version" \
    --define "nvc_release $release" \
    --define "nvc_stage $stage/root" \
    --define "nvc_scripts $scripts" \
    --define "nvc_xz_level $xz_level" \
    "$repo/packaging/rpm/nvc.spec" >&2
rpm="$out_dir/nvc-$version-$release.$arch.rpm"
[ -f "$rpm" ] || nvc_die "rpmbuild made no $rpm"
echo "$rpm"
