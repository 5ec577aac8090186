#!/usr/bin/env bash
# Cross-builds nvc for aarch64 (arm64) Linux on an x86-64 Debian machine, and readies what
# runs the aarch64 binaries here (docs/arm64.md).
#
#   scripts/cross-aarch64.sh             debug build for the tests: nvc, nvc-runtime,
#                                        nvc-cuda-version, nvc-mig-devices and a static
#                                        nvc-hook in
#                                        target/aarch64-unknown-linux-gnu/debug;
#                                        as root, also the arm64 userland and qemu's binfmt entry
#   scripts/cross-aarch64.sh --release   the release binaries as packaged: nvc, nvc-runtime,
#                                        nvc-hook, nvc-cuda-version, nvc-mig-devices, the
#                                        shim and hook static
#                                        (cargo build-shim-static, build-hook-static), in
#                                        target/aarch64-unknown-linux-gnu/release
#
# Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user-static (scripts/deps.sh
# installs them) and the Rust target aarch64-unknown-linux-gnu (added through rustup when
# missing). The arm64 userland (Debian's arm64 libc6, libc-bin for ldconfig, busybox-static)
# is fetched once per machine with a private apt configuration (the host's dpkg
# architectures are left alone) into $NVC_AARCH64_ROOT, default
# /var/cache/nvc-tests/aarch64/root; as root, the debug build's dependencies are kept
# there too. The last line printed is the folder of the binaries.
set -euo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    --release) profile=release ;;
    "") profile=debug ;;
    *)
        echo "unknown argument $1; see --help" >&2
        exit 2
        ;;
esac

cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
cache=${NVC_TESTS_CACHE:-/var/cache/nvc-tests}/aarch64
userland=${NVC_AARCH64_ROOT:-$cache/root}

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.a ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
if [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]} (scripts/deps.sh installs them, as root)" >&2
    exit 1
fi
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi

# The host build's clippy wrapper is not wanted here: the cross build only has to link.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}
target_dir=${CARGO_TARGET_DIR:-target}

if [ "$profile" = release ]; then
    cargo build --release --locked --target "$target" -p nvc-cli -p nvc-hook -p nvc-runtime
    # The aliases of .cargo/config.toml, for this target.
    CARGO_BUILD_TARGET=$target cargo build-shim-static
    CARGO_BUILD_TARGET=$target cargo build-hook-static
    echo "$target_dir/$target/release"
    exit 0
fi

# Tests: the CLI and the shim dynamic (run with qemu -L), the hook static: runc runs it on
# this host, which has no aarch64 loader at /lib. As root, in a target folder kept once per
# machine ($cache/target), as the engine roots are: a fresh clone then compiles only nvc's
# own crates for aarch64, not their dependencies again; the binaries are copied into this
# checkout's target/, under a lock that keeps another checkout's build from replacing
# them first.
out=$target_dir/$target/debug
build_dir=$target_dir
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ "$(id -u)" = 0 ] && mkdir -p "$cache/target" 2>/dev/null; then
    build_dir=$cache/target
    exec 9>"$cache/target.lock"
    flock 9
fi
# nvc's own crates unoptimised (the host's debug build makes some -O1, which the tests'
# few runs under qemu do not need): they are what each checkout compiles.
unoptimised=()
for p in libnvc nvc-host nvc-config nvc-hook nvc-runtime; do
    unoptimised+=(--config "profile.dev.package.$p.opt-level=0")
done
CARGO_TARGET_DIR=$build_dir cargo build "${unoptimised[@]}" --locked --target "$target" \
    -p nvc-cli -p nvc-runtime -p nvc-hook --bin nvc --bin nvc-runtime --bin nvc-cuda-version \
    --bin nvc-mig-devices
CARGO_TARGET_DIR=$build_dir cargo rustc "${unoptimised[@]}" --locked --target "$target" \
    -p nvc-hook --bin nvc-hook -- -C target-feature=+crt-static
if [ "$build_dir" != "$target_dir" ]; then
    mkdir -p "$out"
    for b in nvc nvc-runtime nvc-hook nvc-cuda-version nvc-mig-devices; do
        cp "$build_dir/$target/debug/$b" "$out/$b.new"
        mv "$out/$b.new" "$out/$b"
    done
    exec 9>&-
fi

if [ "$(id -u)" = 0 ]; then
    # One fetch at a time: the suite runs this script beside the tests, which run it too.
    mkdir -p "$cache"
    exec 8>"$cache/userland.lock"
    flock 8
    if [ ! -x "$userland/sbin/ldconfig" ] || [ ! -x "$userland/bin/busybox" ]; then
        apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
            -o Dir::State::Lists="$cache/apt/lists" -o Dir::Cache="$cache/apt/cache"
            -o Dir::State::status=/dev/null)
        mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs"
        apt-get -qq "${apt_opts[@]}" update
        rm -f "$cache"/debs/*.deb
        (cd "$cache/debs" && apt-get -qq "${apt_opts[@]}" download libc6:arm64 libc-bin:arm64 busybox-static:arm64 2>/dev/null)
        rm -rf "$userland.new"
        mkdir -p "$userland.new"
        for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$userland.new"; done
        rm -rf "$userland"
        mv "$userland.new" "$userland"
    fi
    # qemu for aarch64 programs the kernel starts itself (runc's container process), opened
    # now (flag F) so that it is found inside a container's root too.
    binfmt=/proc/sys/fs/binfmt_misc
    [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
    if [ -e "$binfmt/register" ] && [ ! -e "$binfmt/qemu-aarch64" ]; then
        printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' >"$binfmt/register" ||
            echo "cannot register qemu-aarch64 with binfmt_misc: container starts will fail" >&2
    fi
fi
echo "$out"
