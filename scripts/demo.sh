#!/usr/bin/env bash
# The main job: builds nvc, shows what it finds, and starts a demo GPU container through
# nvc-runtime (runc underneath), printing what the container received: its device nodes,
# the driver libraries its loader resolves, and nvidia-smi. Uses the host's driver when
# there is one, else a bundled demo driver tree (fake libraries, real device nodes).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
cargo build --release --locked --workspace
bin=$PWD/target/release
work=$(mktemp -d /tmp/nvc-demo.XXXXXX)

: >"$work/config.toml"
bundle_opts=()
if [ ! -e /proc/driver/nvidia/version ]; then
    echo "No NVIDIA driver on this host: using a demo driver tree in $work/driver"
    fake=$("$bin/nvc-fake-driver" "$work/driver")
    grep -A3 '^\[driver\]' "$fake" >"$work/config.toml"
    # The demo driver's nvidia-smi reads its GPUs from the demo /proc tree.
    bundle_opts=(--fake-proc "$work/driver/proc")
fi
cat >>"$work/config.toml" <<TOML
[hook]
path = "$bin/nvc-hook"
[runtime]
runtimes = ["$(command -v runc)"]
[log]
file = "$work/nvc.log"
level = "info"
TOML
export NVC_CONFIG=$work/config.toml

echo "\$ nvc info"
"$bin/nvc" info
echo
"$bin/nvc-demo-bundle" "$work/bundle" "${bundle_opts[@]}" -e NVIDIA_VISIBLE_DEVICES=all -- sh -c '
    echo "--- device nodes"; ls -l /dev/nvidia*
    echo "--- driver libraries the loader resolves"; ldconfig -p | grep -E "libcuda|libnvidia"
    echo "--- dlopen by soname"; nvc-probe
    echo "--- nvidia-smi -L"; nvidia-smi -L' >/dev/null
echo "\$ nvc-runtime run (NVIDIA_VISIBLE_DEVICES=all), in a rootfs with no NVIDIA file"
cd "$work/bundle"
"$bin/nvc-runtime" --root "$work/state" run nvc-demo
