#!/usr/bin/env bash
# Run here (a machine with network access), before a GPU-machine run: builds nvc in
# release mode and gathers what the GPU machine lacks (runc, libseccomp, a static
# busybox) into .device-carry/, which is git-ignored and carried to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.device-carry
cargo build --release --locked --workspace
mkdir -p "$carry/bin" "$carry/debs"
cp target/release/{nvc,nvc-runtime,nvc-hook,nvc-fake-driver,nvc-bench} "$carry/bin/"
git describe --always --dirty >"$carry/commit"
# A base build to time against (tests/gpu/bench-compare.sh): NVC_OLD_COMMIT=<commit>.
if [ -n "${NVC_OLD_COMMIT:-}" ]; then
    old_tree=$(mktemp -d /tmp/nvc-old.XXXXXX)
    git worktree add --detach "$old_tree" "$NVC_OLD_COMMIT" >/dev/null
    (cd "$old_tree" && CARGO_TARGET_DIR="$PWD/target" cargo build --release --locked \
        -p nvc-runtime -p nvc-hook -p nvc-bench)
    mkdir -p "$carry/old"
    cp "$old_tree"/target/release/{nvc-runtime,nvc-hook,nvc-bench} "$carry/old/"
    git -C "$old_tree" describe --always >"$carry/old/commit"
    git worktree remove --force "$old_tree"
fi
# The benchmark's small rootfs (the GPU machine's own is built there by validate.py).
rm -rf "$carry/bench" && target/release/nvc-demo-bundle "$carry/bench" -- /bin/true >/dev/null
# The payload hostile.sh puts in images (no compiler on the GPU machine).
mkdir -p "$carry/poc" && gcc -shared -fPIC -o "$carry/poc/poc.so" tests/gpu/poc.c
if [ ! -x "$carry/runc/usr/sbin/runc" ]; then
    (cd "$carry/debs" && apt-get download runc libseccomp2 busybox-static)
    rm -rf "$carry/runc" && mkdir -p "$carry/runc"
    for f in "$carry"/debs/*.deb; do dpkg -x "$f" "$carry/runc/"; done
fi
mkdir -p .git/info && { grep -qx "/.device-carry/" .git/info/exclude 2>/dev/null || echo "/.device-carry/" >>.git/info/exclude; }
du -sh "$carry"
