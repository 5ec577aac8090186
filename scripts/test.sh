#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds once, runs every test.
# Run as root on Debian: fake driver trees need mknod and ldconfig's chroot.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
if [ "$(id -u)" != 0 ]; then
    echo "warning: not root; tests that need root will fail and say so" >&2
fi

cargo build --workspace --all-targets --locked
cargo test --workspace --locked
