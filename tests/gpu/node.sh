#!/usr/bin/env bash
# The node installer on the GPU machine's real driver: the static nvc of the installer's
# image (packaging/build-node-image.sh; tests/gpu/prepare.sh unpacks it into
# .device-carry/node) runs `nvc node install` against this machine as the node (its own
# root, its driver), with a containerd config, the install folder and the CDI spec's
# folder of a scratch folder; then a GPU container through the nvc-runtime it installed,
# with no NVC_CONFIG (the config beside the binaries), `nvc info` of the static nvc, and
# `nvc node uninstall`: the scratch folders as before, byte for byte.
# Usage: tests/gpu/node.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:-/tmp/nvc-node}
mkdir -p "$out"
work=$(mktemp -d /tmp/nvc-node.XXXXXX)

. tests/gpu/common.sh
unset NVC_CONFIG

node=$work/node
mkdir -p "$node/etc-containerd" "$node/opt"
printf 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n' \
    >"$node/etc-containerd/config.toml"
digest() { (cd "$node" && find . -printf '%p %m %u:%g %y\n' | sort && find . -type f -exec sha256sum {} + | sort); }
before=$(digest)
args=(--engine=containerd --host-root=/ --reload=none --binaries="$carry/node"
    --install-dir="$node/opt/nvc" --engine-config="$node/etc-containerd/config.toml"
    --cdi-spec="$node/cdi/nvidia.yaml")

# Whether an ELF executable asks for a program interpreter (a dynamic one does).
interp() { python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
phoff, = struct.unpack_from("<Q", d, 32); phentsize, phnum = struct.unpack_from("<HH", d, 54)
print(any(struct.unpack_from("<I", d, phoff + i * phentsize)[0] == 3 for i in range(phnum)))' "$1"; }
echo "--- nvc node install (the image's nvc)"
"$carry/node/nvc" node install "${args[@]}" 2>&1 | tee "$out/install.txt"
check "install succeeded" test "${PIPESTATUS[0]}" = 0
check "the image's nvc is static (no program interpreter)" test "$(interp "$carry/node/nvc")" = False
check "nvc-runtime installed" test -x "$node/opt/nvc/bin/nvc-runtime"
check "containerd's drop-in names the installed runtime" grep -q "$node/opt/nvc/bin/nvc-runtime" "$node/etc-containerd/conf.d/99-nvc.toml"
check "the CDI spec names the GPUs" grep -q 'path: /dev/nvidia0' "$node/cdi/nvidia.yaml"
check "the CDI spec's hook is the installed one" grep -q "$node/opt/nvc/bin/nvc-hook" "$node/cdi/nvidia.yaml"

echo; echo "--- a GPU container through the installed nvc-runtime, no NVC_CONFIG"
# The installed config's runtimes are runc and crun by name: the carried runc on PATH.
b=$(mktemp -d "$work/bundle.XXXXXX")
bundle "$b" NVIDIA_VISIBLE_DEVICES=all 'nvidia-smi -L' >/dev/null
got=$(cd "$b" && env -u NVC_CONFIG PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    "$node/opt/nvc/bin/nvc-runtime" --root "$work/state" run "$(basename "$b")" 2>&1)
echo "$got"
check "nvidia-smi -L inside equals the host's" test "$(echo "$got" | grep '^GPU ')" = "$(nvidia-smi -L)"

echo; echo "--- nvc info of the installed (static) nvc"
info=$(env -u NVC_CONFIG "$node/opt/nvc/bin/nvc" info 2>&1)
echo "$info (exit $?)"
check "info: the driver's version, as nvidia-smi says" grep -q "^Driver version:  $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)$" <<<"$info"
check "info: a CUDA version, asked of nvc-cuda-version" grep -Eq '^CUDA version: +[0-9]+\.[0-9]+' <<<"$info"

echo; echo "--- nvc node uninstall"
"$carry/node/nvc" node uninstall "${args[@]}" 2>&1 | tee "$out/uninstall.txt"
check "uninstall succeeded" test "${PIPESTATUS[0]}" = 0
check "the node's files are as before, byte for byte" test "$(digest)" = "$before"
check "no /etc/nvc was made" test ! -e /etc/nvc

echo
if [ "$fail" = 0 ]; then echo "node: all PASS"; else echo "node: FAIL"; fi
exit $fail
