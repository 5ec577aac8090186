#!/usr/bin/env bash
# Builds the nvc Debian package: release binaries, then a .deb made with dpkg-deb.
#
#   packaging/build-deb.sh [--arch amd64|arm64] [--bin-dir DIR] [--help-from NVC]
#                          [--xz-level N] [--out DIR]
#
# --arch ARCH      the package's architecture (default: this machine's); the binaries
#                  must be for it
# --bin-dir DIR    package the nvc, nvc-runtime, nvc-hook, nvc-cuda-version and
#                  nvc-mig-devices already
#                  built in DIR (the tests package their debug build); without it, this
#                  machine's architecture is built (`cargo build --release`), and arm64 is
#                  cross-built (scripts/cross-aarch64.sh --release)
# --help-from NVC  an nvc of the same version that runs here, for the --help text in
#                  nvc.txt when the packaged one cannot run here (another architecture)
# --xz-level N     how hard xz compresses (0-9, default 6, as dpkg-deb does): the tests take
#                  0, which packs their debug build in a tenth of the time
# --out DIR        where the .deb goes (default target/deb)
#
# Prints the path of the .deb on its last line. Needs dpkg-deb, readelf and strip
# (binutils; binutils-aarch64-linux-gnu for arm64 elsewhere) and md5sum; runs as any user
# (file owners in the package are root through --root-owner-group).
set -euo pipefail

# shellcheck source=packaging/payload.sh
. "$(dirname "$0")/payload.sh"
repo="$nvc_repo"
bin_dir=""
help_from=""
arch=""
xz_level=6
out_dir="$repo/target/deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch="${2:?--arch needs amd64 or arm64}"; shift 2 ;;
        --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --help-from) help_from="${2:?--help-from needs a program}"; shift 2 ;;
        --xz-level) xz_level="${2:?--xz-level needs 0 to 9}"; shift 2 ;;
        --out) out_dir="${2:?--out needs a directory}"; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for tool in dpkg-deb md5sum; do
    command -v "$tool" >/dev/null || nvc_die "$tool is missing (apt-get install dpkg coreutils)"
done
case "${arch:=$(dpkg --print-architecture)}" in
    amd64|arm64) ;;
    *) nvc_die "--arch is amd64 or arm64, not $arch" ;;
esac
elf_arch="$(nvc_elf_arch "$arch")"
case "$xz_level" in
    [0-9]) ;;
    *) nvc_die "--xz-level is 0 to 9, not $xz_level" ;;
esac
version="$(nvc_version)"
[ -n "$bin_dir" ] || bin_dir="$(nvc_bin_dir "$elf_arch")"
bin_dir="$(cd "$bin_dir" && pwd)"

mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
stage="$(mktemp -d "$out_dir/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
nvc_stage "$root" "$bin_dir" "$elf_arch" "$help_from"

# Maintainer scripts: the CDI refresh's units enabled and started; on removal, nvc taken
# out of the engines' configs again and the units stopped.
install -d "$root/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "$repo/packaging/deb/$script" "$root/DEBIAN/$script"
done
echo "/etc/nvc/config.toml" >"$root/DEBIAN/conffiles"

glibc="$(nvc_glibc "$root")"
depends="libc6 (>= ${glibc:-2.17}), libgcc-s1"

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat >"$root/DEBIAN/control" <<EOF
Package: nvc
Version: $version
Architecture: $arch
Maintainer: nvc developers <nvc@localhost>
Installed-Size: $installed_size
Depends: $depends
Recommends: runc | crun
Suggests: docker.io | podman | containerd
Section: utils
Priority: optional
Description: GPUs for OCI containers
 nvc gives containers started by Docker, Podman, containerd or runc the host's
 NVIDIA driver: its libraries, tools, firmware and /dev/nvidia* nodes. It does
 the job of the NVIDIA Container Toolkit: nvc-runtime is a runc-compatible
 runtime, nvc-hook an OCI prestart hook, and \`nvc runtime configure\` registers
 them with an engine. nvc-cdi-refresh keeps a CDI spec of the GPUs in
 /var/run/cdi for CDI-aware engines.
EOF

deb="$out_dir/nvc_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz "-z$xz_level" --build "$root" "$deb" >/dev/null
echo "$deb"
