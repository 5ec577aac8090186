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
mkdir -p .git/info && { grep -qx "/.device-carry/" .git/info/exclude 2>/dev/null || echo "/.device-carry/" >>.git/info/exclude; }
du -sh "$carry"
