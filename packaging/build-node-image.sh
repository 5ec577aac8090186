#!/usr/bin/env bash
# Builds the node installer's image (docs/kubernetes.md): an OCI image archive holding
# nvc's binaries under /nvc/bin and nothing else, no base image, whose entry point,
# `nvc node run`, installs nvc on the node it runs on and takes it off when stopped.
#
#   packaging/build-node-image.sh [--arch amd64|arm64] [--bin-dir DIR] [--output FILE]
#                                 [--name NAME] [--tag TAG]
#
#   --arch     the image's architecture [default: this machine's]
#   --bin-dir  take nvc, nvc-runtime, nvc-hook, nvc-cuda-version and nvc-mig-devices from
#              DIR instead of
#              building them (release, nvc and the shim and hook static: the image has no
#              libc; a dynamic nvc given here gets the libraries it loads copied in)
#   --output   the archive [default: target/nvc-node-VERSION-ARCH.oci.tar]
#   --name     the image's name [default: nvc-node]
#   --tag      its tag [default: the workspace's version]
#
# The archive is an OCI image layout in a tar (`skopeo copy oci-archive:FILE
# docker://REGISTRY/nvc-node:TAG`, `ctr images import FILE`, `podman load -i FILE`). It
# is the same bytes for the same binaries: names sorted, times and owners zero.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/payload.sh"

arch="" bin_dir="" output="" name="nvc-node" tag=""
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch="${2:?--arch needs amd64 or arm64}"; shift 2 ;;
        --bin-dir) bin_dir="${2:?--bin-dir needs a folder}"; shift 2 ;;
        --output) output="${2:?--output needs a file}"; shift 2 ;;
        --name) name="${2:?--name needs a name}"; shift 2 ;;
        --tag) tag="${2:?--tag needs a tag}"; shift 2 ;;
        -h|--help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) nvc_die "unknown option $1 (--help)" ;;
    esac
done
for tool in sha256sum gzip tar readelf; do
    command -v "$tool" >/dev/null || nvc_die "$tool is missing"
done

elf_arch="$(nvc_elf_arch "${arch:-$(uname -m)}")"
case "$elf_arch" in
    x86_64) oci_arch=amd64 ;;
    aarch64) oci_arch=arm64 ;;
esac
version="$(nvc_version)"
tag="${tag:-$version}"
output="${output:-$nvc_repo/target/nvc-node-$version-$oci_arch.oci.tar}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
install -d -m 0755 "$rootfs/nvc/bin" "$rootfs/run"
install -d -m 1777 "$rootfs/tmp"

# The binaries: built here unless given, each copied as soon as it is built (the static
# CLI and the packages' dynamic one share target/release/nvc).
if [ -z "$bin_dir" ]; then
    bin_dir="$(nvc_bin_dir "$elf_arch")"
    cp "$bin_dir/nvc-cuda-version" "$bin_dir/nvc-mig-devices" "$bin_dir/nvc-runtime" \
        "$bin_dir/nvc-hook" "$rootfs/nvc/bin/"
    if [ "$elf_arch" = "$(uname -m)" ]; then
        (cd "$nvc_repo" && cargo build-cli-static) >&2
    else
        (cd "$nvc_repo" && CARGO_BUILD_TARGET="$elf_arch-unknown-linux-gnu" cargo build-cli-static) >&2
    fi
    cp "$bin_dir/nvc" "$rootfs/nvc/bin/"
else
    for b in "${nvc_binaries[@]}"; do
        [ -x "$bin_dir/$b" ] || nvc_die "$bin_dir/$b is missing"
        cp "$bin_dir/$b" "$rootfs/nvc/bin/"
    done
fi
machine="$(nvc_elf_machine "$elf_arch")"
strip="$(nvc_strip_tool "$elf_arch")"
for b in "${nvc_binaries[@]}"; do
    found="$(readelf -h "$rootfs/nvc/bin/$b" 2>/dev/null | sed -n 's/^ *Machine: *//p')"
    [ "$found" = "$machine" ] ||
        nvc_die "$b is for ${found:-no known machine (not an ELF file)}, not $elf_arch"
    chmod 0755 "$rootfs/nvc/bin/$b"
    "$strip" --strip-unneeded "$rootfs/nvc/bin/$b"
done

# nvc runs in the image; the others run on the node. A dynamic nvc (a debug build given
# with --bin-dir) brings the loader and libraries it needs, from this machine.
if readelf -l "$rootfs/nvc/bin/nvc" | grep -q "Requesting program interpreter"; then
    [ "$elf_arch" = "$(uname -m)" ] ||
        nvc_die "$bin_dir/nvc is dynamic: give a static $elf_arch nvc (cargo build-cli-static)"
    while read -r lib; do
        [ -n "$lib" ] || continue
        install -d "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done < <(ldd "$rootfs/nvc/bin/nvc" | grep -o '/[^ ]*' | sort -u)
    echo "$(basename "$0"): nvc is dynamic: its libraries are in the image" >&2
fi

# One layer, the same bytes for the same files.
layout="$work/layout"
blobs="$layout/blobs/sha256"
install -d "$blobs"
tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -cf "$work/layer.tar" .
diff_id="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
gzip -n -9 -c "$work/layer.tar" >"$work/layer.tar.gz"
layer="$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)"
mv "$work/layer.tar.gz" "$blobs/$layer"

blob() { # FILE -> its digest, the file moved into blobs/
    local digest
    digest="$(sha256sum "$1" | cut -d' ' -f1)"
    mv "$1" "$blobs/$digest"
    echo "$digest"
}
size() { stat -c %s "$blobs/$1"; }

printf '%s' '{"architecture":"'"$oci_arch"'","os":"linux","config":{"Entrypoint":["/nvc/bin/nvc","node","run"],"Env":["PATH=/nvc/bin"],"WorkingDir":"/","User":"0:0","Labels":{"org.opencontainers.image.title":"nvc node installer","org.opencontainers.image.version":"'"$version"'","org.opencontainers.image.licenses":"Apache-2.0"}},"rootfs":{"type":"layers","diff_ids":["sha256:'"$diff_id"'"]},"history":[{"created_by":"packaging/build-node-image.sh"}]}' >"$work/config.json"
config="$(blob "$work/config.json")"
printf '%s' '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:'"$config"'","size":'"$(size "$config")"'},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:'"$layer"'","size":'"$(size "$layer")"'}]}' >"$work/manifest.json"
manifest="$(blob "$work/manifest.json")"
printf '%s' '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:'"$manifest"'","size":'"$(size "$manifest")"',"platform":{"architecture":"'"$oci_arch"'","os":"linux"},"annotations":{"io.containerd.image.name":"docker.io/library/'"$name:$tag"'","org.opencontainers.image.ref.name":"'"$tag"'"}}]}' >"$layout/index.json"
printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

mkdir -p "$(dirname "$output")"
tar -C "$layout" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$output.tmp" .
mv "$output.tmp" "$output"
echo "$output"
echo "$(basename "$0"): $name:$tag ($oci_arch), manifest sha256:$manifest" >&2
