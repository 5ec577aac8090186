#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks formatting, builds once, lints,
# runs every test. Run as root on Debian: fake driver trees need mknod and ldconfig's
# chroot.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
if [ "$(id -u)" != 0 ]; then
    echo "warning: not root; tests that need root will fail and say so" >&2
fi

# Formatting and lints, as the house style asks. A cargo without rustfmt or clippy
# (Debian's cargo-web) cannot check them: say so loudly rather than pass in silence.
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all --check
else
    echo "NOT CHECKED: formatting (this cargo has no rustfmt; rust-toolchain.toml names it)" >&2
fi
# The OCI runtime-tools validation programs the oci_validation suite runs, built once per
# machine from the archive in ../shared (scripts/oci-suite.sh), while cargo builds; when
# they cannot be, that suite fails and says why, and the others still run.
bash scripts/oci-suite.sh >/dev/null &
oci_suite=$!
cargo build --workspace --all-targets --locked
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --workspace --all-targets --locked -- -D warnings
else
    echo "NOT CHECKED: lints (this cargo has no clippy; rust-toolchain.toml names it)" >&2
fi
# Doc links stay true when code moves.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --locked --quiet
wait "$oci_suite" ||
    echo "warning: the OCI validation programs are not built; the oci_validation suite will fail" >&2
cargo test --workspace --locked --no-fail-fast
