#!/usr/bin/env bash
# Builds the nvc Debian package: release binaries, then a .deb made with dpkg-deb.
#
#   packaging/build-deb.sh [--bin-dir DIR] [--out DIR]
#
# --bin-dir DIR  package the nvc, nvc-runtime, nvc-hook and nvc-cuda-version already built
#                in DIR instead of running `cargo build --release` (the tests package
#                their debug build)
# --out DIR      where the .deb goes (default target/deb)
#
# Prints the path of the .deb on its last line. Needs dpkg-deb, readelf (binutils) and
# md5sum; runs as any user (file owners in the package are root through
# --root-owner-group).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
bin_dir=""
out_dir="$repo/target/deb"
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --out) out_dir="${2:?--out needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for tool in dpkg-deb readelf strip md5sum; do
    command -v "$tool" >/dev/null || { echo "build-deb.sh: $tool is missing (apt-get install dpkg binutils coreutils)" >&2; exit 1; }
done

# The workspace's version: [workspace.package] version in the root Cargo.toml.
version="$(awk '/^\[workspace\.package\]/ {p=1; next} /^\[/ {p=0}
    p && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' "$repo/Cargo.toml")"
[ -n "$version" ] || { echo "build-deb.sh: no [workspace.package] version in Cargo.toml" >&2; exit 1; }

if [ -z "$bin_dir" ]; then
    (cd "$repo" && cargo build --release --locked -p nvc-cli -p nvc-runtime -p nvc-hook)
    # The shim and the hook static (.cargo/config.toml says why): every container execs
    # the shim, every GPU container the hook.
    (cd "$repo" && cargo build-shim-static && cargo build-hook-static)
    bin_dir="$repo/target/release"
fi
bin_dir="$(cd "$bin_dir" && pwd)"
for b in nvc nvc-runtime nvc-hook nvc-cuda-version; do
    [ -x "$bin_dir/$b" ] || { echo "build-deb.sh: $bin_dir/$b is missing" >&2; exit 1; }
done

mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
stage="$(mktemp -d "$out_dir/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
doc="$root/usr/share/doc/nvc"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/nvc" "$doc" \
    "$root/usr/share/containers/oci/hooks.d" "$root/usr/lib/systemd/system"

# Binaries, stripped as dh_strip would. (`docker run --gpus` needs a link named
# nvidia-container-runtime-hook: `nvc runtime configure --runtime docker --gpus-alias`
# makes it, and `--revert` takes it away, so the package does not ship it.)
for b in nvc nvc-runtime nvc-hook nvc-cuda-version; do
    install -m 0755 "$bin_dir/$b" "$root/usr/bin/$b"
    strip --strip-unneeded "$root/usr/bin/$b"
done
if [ -f "$repo/packaging/nv-docker" ]; then
    install -m 0755 "$repo/packaging/nv-docker" "$root/usr/bin/nv-docker"
fi

install -m 0644 "$repo/config/config.toml" "$root/etc/nvc/config.toml"

# Podman (and CRI-O) run every hook in hooks.d; nvc-hook does nothing for a container
# that asks for no GPU; at poststop (state "stopped") it takes away what it made in the
# rootfs. timeout: the shipped hook.timeout (30) plus the 2 s the runtime waits before it
# kills the hook.
cat >"$root/usr/share/containers/oci/hooks.d/oci-nvc-hook.json" <<'EOF'
{
  "version": "1.0.0",
  "hook": {
    "path": "/usr/bin/nvc-hook",
    "args": ["nvc-hook", "prestart"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "timeout": 32
  },
  "when": { "always": true },
  "stages": ["prestart", "poststop"]
}
EOF

# The CDI refresh: /var/run/cdi/nvidia.yaml rewritten at boot and when the driver
# changes (postinst enables the units).
for unit in nvc-cdi-refresh.service nvc-cdi-refresh.path; do
    install -m 0644 "$repo/packaging/systemd/$unit" "$root/usr/lib/systemd/system/$unit"
done

# Documentation: the README and every command's --help, man-page style.
install -m 0644 "$repo/README.md" "$doc/README.md"
cat >"$doc/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nvc

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
# `nvc --help`, then each subcommand's, depth first (clap lists them under "Commands:").
help_tree() {
    local -a path=("$@")
    printf '%s\n\n' "==> nvc ${path[*]}${path:+ }--help"
    local text
    text="$("$bin_dir/nvc" "${path[@]}" --help)"
    printf '%s\n\n' "$text"
    local sub
    for sub in $(printf '%s\n' "$text" | awk '/^Commands:/ {c=1; next} /^$/ {c=0} c {print $1}'); do
        [ "$sub" = help ] || help_tree "${path[@]}" "$sub"
    done
}
{
    echo "NVC(1)"
    echo
    echo "NAME"
    echo "    nvc, nvc-runtime, nvc-hook - GPUs for OCI containers (version $version)"
    echo
    echo "SEE ALSO"
    echo "    /usr/share/doc/nvc/README.md, /etc/nvc/config.toml"
    echo
    help_tree
} >"$doc/nvc.txt"
chmod 0644 "$doc/nvc.txt"

# Maintainer scripts: the CDI refresh's units enabled and started; on removal, nvc taken
# out of the engines' configs again and the units stopped.
for script in postinst prerm postrm; do
    install -m 0755 "$repo/packaging/deb/$script" "$root/DEBIAN/$script"
done
echo "/etc/nvc/config.toml" >"$root/DEBIAN/conffiles"

# The newest glibc symbol version the binaries use, as dpkg-shlibdeps would find it.
glibc="$(for b in nvc nvc-runtime nvc-hook nvc-cuda-version; do readelf -W --dyn-syms "$root/usr/bin/$b"; done |
    grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n1)"
depends="libc6 (>= ${glibc:-2.17}), libgcc-s1"

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat >"$root/DEBIAN/control" <<EOF
Package: nvc
Version: $version
Architecture: amd64
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

deb="$out_dir/nvc_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
