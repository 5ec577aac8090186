#!/usr/bin/env bash
# Run here (a machine with network access), before a GPU-machine run: builds nvc in
# release mode and gathers what the GPU machine lacks (runc, libseccomp, a static
# busybox) into .device-carry/, which is git-ignored and carried to the GPU machine.
# For tests/gpu/check-and-bench.sh, carry .device-carry/check alone: it packs what that
# script needs, NVIDIA's Container Toolkit and Podman included.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.device-carry
cargo build --release --locked --workspace
# The shim and the hook as they are packaged: static (.cargo/config.toml says why).
cargo build-shim-static
cargo build-hook-static
cargo build-floor-static
mkdir -p "$carry/bin" "$carry/debs"
cp target/release/{nvc,nvc-runtime,nvc-hook,nvc-cuda-version,nvc-mig-devices,nvc-fake-driver,nvc-bench,nvc-floor,nvc-cri} "$carry/bin/"
git describe --always --dirty >"$carry/commit"
# The node installer's image (tests/gpu/node.sh runs its static nvc): built, and its one
# layer's /nvc/bin unpacked into $carry/node.
bash packaging/build-node-image.sh --output target/nvc-node-gpu.oci.tar >/dev/null
rm -rf "$carry/node" && mkdir -p "$carry/node"
layout=$(mktemp -d /tmp/nvc-node-image.XXXXXX)
tar -C "$layout" -xf target/nvc-node-gpu.oci.tar
layer=$(ls -S "$layout"/blobs/sha256/* | head -1)
tar -C "$layout" -xzf "$layer" ./nvc/bin
cp "$layout"/nvc/bin/* "$carry/node/"
rm -rf "$layout"
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
# NVIDIA's Container Toolkit 1.20 with libnvidia-container 1.17, built for comparisons (the
# shared folder beside the checkout, or NVC_NVIDIA_TOOLKIT), carried as its archive:
# check-and-bench.sh unpacks it and times it beside nvc (nvc-bench --nvidia-toolkit).
toolkit=${NVC_NVIDIA_TOOLKIT:-$(ls -d ../shared/nvidia-toolkit/nct-*-carry.tar.xz 2>/dev/null | tail -1 || true)}
if [ -s "$toolkit" ]; then
    cp "$toolkit" "$carry/bench/nvidia-toolkit.tar.xz"
else
    echo "prepare.sh: no NVIDIA Container Toolkit archive (../shared/nvidia-toolkit/nct-*-carry.tar.xz or NVC_NVIDIA_TOOLKIT): the benchmark will run without it" >&2
fi
# The payload hostile.sh puts in images (no compiler on the GPU machine).
mkdir -p "$carry/poc" && gcc -shared -fPIC -o "$carry/poc/poc.so" tests/gpu/poc.c
# A CUDA process that holds GPU memory, for tests/gpu/top.sh.
gcc -O2 -Wall -o "$carry/poc/cuda-hold" tests/gpu/cuda-hold.c
if [ ! -x "$carry/runc/usr/sbin/runc" ]; then
    (cd "$carry/debs" && apt-get download runc libseccomp2 busybox-static)
    rm -rf "$carry/runc" && mkdir -p "$carry/runc"
    for f in "$carry"/debs/*.deb; do dpkg -x "$f" "$carry/runc/"; done
fi
# Newer low-level runtimes (tests/gpu/runtimes.sh): Debian 13's crun 1.21 and Debian 14's
# runc 1.3 and crun 1.28, with the libraries the GPU machine lacks, each in a folder of its
# own (libblake3 and json-c for crun 1.28). Fetched with their suites' lists in a private apt state; /etc/apt is left alone.
if [ ! -x "$carry/runtimes/crun-1.28/crun" ]; then
    lists=$(mktemp -d /tmp/nvc-apt.XXXXXX)
    fetch() { # fetch SUITE PACKAGE...: the packages' .debs into the current folder
        local suite=$1; shift
        mkdir -p "$lists/$suite/lists/partial"
        echo "deb http://deb.debian.org/debian $suite main" >"$lists/$suite.list"
        local o=(-o Dir::Etc::sourcelist="$lists/$suite.list" -o Dir::Etc::sourceparts=-
            -o Dir::State::Lists="$lists/$suite/lists")
        apt-get -qq "${o[@]}" update && apt-get -qq "${o[@]}" download "$@"
    }
    rm -rf "$carry/runtimes" && mkdir -p "$carry/runtimes/debs"
    (cd "$carry/runtimes/debs" && fetch trixie crun libyajl2 libseccomp2 && fetch forky runc crun libblake3-0 libjson-c5)
    for d in "$carry"/runtimes/debs/*.deb; do dpkg -x "$d" "$lists/x"; done
    for name in crun-1.21 crun-1.28 runc-1.3; do
        case $name in
            crun-1.21) deb=$(ls "$carry"/runtimes/debs/crun_1.21*.deb) ;;
            crun-1.28) deb=$(ls "$carry"/runtimes/debs/crun_1.28*.deb) ;;
            runc-1.3) deb=$(ls "$carry"/runtimes/debs/runc_1.3*.deb) ;;
        esac
        rm -rf "$lists/one" && dpkg -x "$deb" "$lists/one"
        mkdir -p "$carry/runtimes/$name/lib"
        find "$lists/one" -type f \( -name crun -o -name runc \) -perm -u+x -exec cp {} "$carry/runtimes/$name/" \;
        # Each by its soname, as a file: a link would travel as a link alone.
        for lib in libyajl.so.2 libseccomp.so.2 libblake3.so.0 libjson-c.so.5; do
            cp -L "$lists/x/usr/lib/x86_64-linux-gnu/$lib" "$carry/runtimes/$name/lib/$lib"
        done
    done
    rm -rf "$carry/runtimes/debs" "$lists"
fi
# The engines tests/gpu/engines.sh starts (Debian 13's Docker 26 with its containerd and
# ctr, Podman 5.4 with conmon and netavark), with the libraries they load that a bare
# machine may lack, packed into one xz archive (the Go programs are large).
if [ ! -s "$carry/engines/engines.tar.xz" ]; then
    apt_state=$(mktemp -d /tmp/nvc-apt.XXXXXX)
    mkdir -p "$apt_state/lists/partial" "$apt_state/debs" "$apt_state/x" "$apt_state/pack/bin" "$apt_state/pack/lib"
    echo "deb http://deb.debian.org/debian trixie main" >"$apt_state/trixie.list"
    o=(-o Dir::Etc::sourcelist="$apt_state/trixie.list" -o Dir::Etc::sourceparts=-
        -o Dir::State::Lists="$apt_state/lists")
    apt-get -qq "${o[@]}" update
    (cd "$apt_state/debs" && apt-get -qq "${o[@]}" download docker.io docker-cli containerd \
        podman conmon netavark libsubid5 libsqlite3-0 libgpgme11t64 libassuan9 libgpg-error0 \
        libseccomp2 libaudit1 libcap-ng0 libselinux1 libsemanage2 libsepol2 libcrypt1 libacl1 \
        libattr1 libpam0g libbsd0 libmd0 libpcre2-8-0 libbz2-1.0 libglib2.0-0t64 libsystemd0 \
        libatomic1 libcap2 libzstd1 liblz4-1 liblzma5 libgcrypt20 libffi8)
    for d in "$apt_state"/debs/*.deb; do dpkg -x "$d" "$apt_state/x"; done
    x=$apt_state/x
    cp "$x/usr/sbin/dockerd" "$x/usr/bin/docker" "$x/usr/bin/containerd" "$x/usr/bin/ctr" \
        "$x/usr/bin/containerd-shim-runc-v2" "$x/usr/bin/podman" "$x/usr/bin/conmon" \
        "$x/usr/lib/podman/netavark" "$apt_state/pack/bin/"
    # Each library by its soname, as a file; engines.sh installs those the machine lacks.
    find "$x/usr/lib/x86_64-linux-gnu" -maxdepth 1 -name 'lib*.so.*' |
        while read -r lib; do
            soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
            if [ -n "$soname" ] && [ "$(basename "$lib")" = "$soname" ]; then cp -L "$lib" "$apt_state/pack/lib/"; fi
        done
    (cd "$apt_state/debs" && ls *.deb) >"$apt_state/pack/packages"
    mkdir -p "$carry/engines"
    # One block with a dictionary larger than the archive: the Go programs share much code
    # (about 52 MB instead of 58 with xz -9; some nine minutes of one core).
    tar -C "$apt_state/pack" -cf - . | xz -T1 --lzma2=preset=9e,dict=256MiB >"$carry/engines/engines.tar.xz"
    rm -rf "$apt_state"
fi
# strace for tests/gpu/strace-hooks.sh (the GPU machine has none): Debian's, with the
# libraries it loads that an Ubuntu machine may lack, each by its soname as a file.
if [ ! -x "$carry/strace/strace" ]; then
    rm -rf "$carry/strace" && mkdir -p "$carry/strace/lib" "$carry/strace/debs"
    (cd "$carry/strace/debs" && apt-get -qq download strace libunwind8 liblzma5)
    for d in "$carry"/strace/debs/*.deb; do dpkg -x "$d" "$carry/strace/x"; done
    cp "$carry/strace/x/usr/bin/strace" "$carry/strace/strace"
    for lib in libunwind-ptrace.so.0 libunwind-x86_64.so.8 libunwind.so.8 liblzma.so.5; do
        cp -L "$(find "$carry/strace/x" -name "$lib" | head -1)" "$carry/strace/lib/$lib"
    done
    rm -rf "$carry/strace/debs" "$carry/strace/x"
fi
# What engines.sh needs besides the engines, small enough to go with them in one call:
# nvc's binaries, runc with libseccomp and busybox, the commit.
mkdir -p "$carry/engines" && tar -C "$carry" -cf - bin/nvc bin/nvc-runtime bin/nvc-hook bin/nvc-cri commit runc/usr/sbin/runc \
    runc/usr/lib/x86_64-linux-gnu runc/bin/busybox | xz -T0 -9 >"$carry/engines/support.tar.xz"
# Podman alone for the benchmark's Podman table (nvc-bench --podman): podman, conmon and
# netavark with the engines' libraries, out of the engines' archive (Docker's programs are
# most of that one).
if [ ! -s "$carry/check/podman.tar.xz" ]; then
    pack=$(mktemp -d /tmp/nvc-podman.XXXXXX)
    xz -dc "$carry/engines/engines.tar.xz" | tar -C "$pack" -xf - ./bin/podman ./bin/conmon ./bin/netavark ./lib ./packages
    mkdir -p "$carry/check"
    tar -C "$pack" -cf - . | xz -T1 --lzma2=preset=9e,dict=64MiB >"$carry/check/podman.tar.xz"
    rm -rf "$pack"
fi
# Everything tests/gpu/check-and-bench.sh needs in one carried folder, $carry/check (one
# call carries 64 MiB at most, which the folders themselves and Podman pass): this
# archive of bin/, runc/, poc/, bench/ (the Toolkit's archive in it), prev/ when there is
# one, and commit; check-and-bench.sh unpacks it over .device-carry there.
mkdir -p "$carry/check"
packed=(bin runc poc bench commit)
[ -d "$carry/prev" ] && packed+=(prev)
tar -C "$carry" -cf - "${packed[@]}" | xz -T0 -6 >"$carry/check/pack.tar.xz"
mkdir -p .git/info && { grep -qx "/.device-carry/" .git/info/exclude 2>/dev/null || echo "/.device-carry/" >>.git/info/exclude; }
du -sh "$carry" "$carry/check"
