#!/usr/bin/env bash
# The main job: builds nvc and shows what it finds: the host's driver when there is
# one, else a bundled demo driver tree (fake libraries, nodes and /proc files).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
cargo build --release --locked --workspace
bin=target/release

if [ -z "${NVC_CONFIG:-}" ] && [ ! -e /proc/driver/nvidia/version ] && [ ! -e /etc/nvc/config.toml ]; then
    demo=$(mktemp -d /tmp/nvc-demo.XXXXXX)
    echo "No NVIDIA driver on this host: using a demo driver tree in $demo"
    NVC_CONFIG=$("$bin/nvc-fake-driver" "$demo/tree")
    export NVC_CONFIG
fi

echo "\$ nvc info"
"$bin/nvc" info
echo
echo "\$ nvc list --devices 0"
"$bin/nvc" list --devices 0
