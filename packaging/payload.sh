# Sourced by build-deb.sh and build-rpm.sh: what both packages install, staged the same
# way for both, so that the .deb and the RPM hold the same files with the same modes.
#
#   nvc_version                    the workspace's version ([workspace.package] version)
#   nvc_elf_arch ARCH              x86_64 or aarch64, from a deb or rpm architecture name
#   nvc_bin_dir ELF_ARCH           where the binaries are when no --bin-dir is given
#   nvc_stage ROOT BIN_DIR ELF_ARCH [HELP_FROM]
#                                  the payload under ROOT: binaries (checked for ELF_ARCH
#                                  and stripped), config, hooks.d file, units, docs
#
# Needs readelf and strip (binutils; for aarch64 on another host, aarch64-linux-gnu-strip
# from binutils-aarch64-linux-gnu).

nvc_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvc_binaries=(nvc nvc-runtime nvc-hook nvc-cuda-version nvc-mig-devices)

nvc_die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

nvc_version() {
    local version
    version="$(awk '/^\[workspace\.package\]/ {p=1; next} /^\[/ {p=0}
        p && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' "$nvc_repo/Cargo.toml")"
    [ -n "$version" ] || nvc_die "no [workspace.package] version in Cargo.toml"
    echo "$version"
}

nvc_elf_arch() {
    case "$1" in
        amd64|x86_64) echo x86_64 ;;
        arm64|aarch64) echo aarch64 ;;
        *) nvc_die "unknown architecture $1 (amd64 or arm64 for the .deb, x86_64 or aarch64 for the RPM)" ;;
    esac
}

# readelf's name of the machine each architecture's executables are for.
nvc_elf_machine() {
    case "$1" in
        x86_64) echo "Advanced Micro Devices X86-64" ;;
        aarch64) echo "AArch64" ;;
    esac
}

# Without --bin-dir: this machine's architecture is built here (release, the shim and the
# hook static, .cargo/config.toml says why); aarch64 on an x86-64 machine is cross-built
# by scripts/cross-aarch64.sh --release, the same way.
nvc_bin_dir() {
    local arch="$1"
    if [ "$arch" = "$(uname -m)" ]; then
        (cd "$nvc_repo" && cargo build --release --locked -p nvc-cli -p nvc-runtime -p nvc-hook) >&2
        (cd "$nvc_repo" && cargo build-shim-static && cargo build-hook-static) >&2
        echo "$nvc_repo/target/release"
    elif [ "$arch" = aarch64 ]; then
        bash "$nvc_repo/scripts/cross-aarch64.sh" --release >&2 ||
            nvc_die "the aarch64 cross build failed (above); or give --bin-dir"
        echo "$nvc_repo/target/aarch64-unknown-linux-gnu/release"
    else
        nvc_die "no way to build $arch binaries on $(uname -m): give --bin-dir"
    fi
}

# The strip that knows ELF_ARCH's executables.
nvc_strip_tool() {
    if [ "$1" = "$(uname -m)" ]; then
        echo strip
    elif command -v "$1-linux-gnu-strip" >/dev/null; then
        echo "$1-linux-gnu-strip"
    else
        nvc_die "$1-linux-gnu-strip is missing (apt-get install binutils-$1-linux-gnu)"
    fi
}

nvc_stage() {
    local root="$1" bin_dir="$2" arch="$3" help_from="${4:-}"
    local version machine strip b tool
    version="$(nvc_version)"
    for tool in readelf strip; do
        command -v "$tool" >/dev/null || nvc_die "$tool is missing (apt-get install binutils)"
    done
    strip="$(nvc_strip_tool "$arch")"
    machine="$(nvc_elf_machine "$arch")"
    local doc="$root/usr/share/doc/nvc"
    install -d "$root/usr/bin" "$root/etc/nvc" "$doc" \
        "$root/usr/share/containers/oci/hooks.d" "$root/usr/lib/systemd/system"

    # Binaries, for the package's architecture, stripped as dh_strip would. (`docker run
    # --gpus` needs a link named nvidia-container-runtime-hook: `nvc runtime configure
    # --runtime docker --gpus-alias` makes it, and `--revert` takes it away, so the
    # packages do not ship it.)
    for b in "${nvc_binaries[@]}"; do
        [ -x "$bin_dir/$b" ] || nvc_die "$bin_dir/$b is missing"
        local found
        found="$(readelf -h "$bin_dir/$b" 2>/dev/null | sed -n 's/^ *Machine: *//p')"
        [ "$found" = "$machine" ] ||
            nvc_die "$bin_dir/$b is for ${found:-no known machine (not an ELF file)}, not $arch: give the $arch binaries"
        install -m 0755 "$bin_dir/$b" "$root/usr/bin/$b"
        "$strip" --strip-unneeded "$root/usr/bin/$b"
    done
    install -m 0755 "$nvc_repo/packaging/nv-docker" "$root/usr/bin/nv-docker"

    install -m 0644 "$nvc_repo/config/config.toml" "$root/etc/nvc/config.toml"

    # Podman (and CRI-O) run every hook in hooks.d; nvc-hook does nothing for a container
    # that asks for no GPU; at poststop (state "stopped") it takes away what it made in the
    # rootfs. timeout: the shipped hook.timeout (30) plus the 2 s the runtime waits before
    # it kills the hook.
    cat >"$root/usr/share/containers/oci/hooks.d/oci-nvc-hook.json" <<'EOF'
{
  "version": "1.0.0",
  "hook": {
    "path": "/usr/bin/nvc-hook",
    "args": ["nvc-hook", "prestart"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "timeout": 32
  },
  "when": { "always": true },
  "stages": ["prestart", "poststop"]
}
EOF
    chmod 0644 "$root/usr/share/containers/oci/hooks.d/oci-nvc-hook.json"

    # The CDI refresh: /var/run/cdi/nvidia.yaml rewritten at boot and when the driver
    # changes (the packages' install scripts enable the units).
    local unit
    for unit in nvc-cdi-refresh.service nvc-cdi-refresh.path; do
        install -m 0644 "$nvc_repo/packaging/systemd/$unit" "$root/usr/lib/systemd/system/$unit"
    done
    # The GPU health record's timer (enabled by the admin: systemctl enable --now
    # nvc-health.timer).
    for unit in nvc-health.service nvc-health.timer; do
        install -m 0644 "$nvc_repo/packaging/systemd/$unit" "$root/usr/lib/systemd/system/$unit"
    done

    # Documentation: the README, the license and every command's --help, man-page style.
    install -m 0644 "$nvc_repo/README.md" "$doc/README.md"
    cat >"$doc/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nvc

Files: *
License: Apache-2.0
 The full text of the Apache License 2.0 is at
 https://www.apache.org/licenses/LICENSE-2.0 (on Debian systems also in
 /usr/share/common-licenses/Apache-2.0).
EOF
    chmod 0644 "$doc/copyright"
    # The help text comes from a program that runs here: the packaged nvc when it is for
    # this machine, else HELP_FROM, an nvc of the same version built for this machine.
    local nvc="$bin_dir/nvc"
    if [ -n "$help_from" ]; then
        nvc="$help_from"
    elif [ "$arch" != "$(uname -m)" ]; then
        nvc_die "the $arch nvc cannot run here to write its --help into nvc.txt: give --help-from with an nvc of version $version built for $(uname -m)"
    fi
    local said
    said="$("$nvc" --version)" || nvc_die "$nvc --version failed"
    [ "$said" = "nvc $version" ] || nvc_die "$nvc says \"$said\", not \"nvc $version\": its --help is not this version's"
    # `nvc --help`, then each subcommand's, depth first (clap lists them under "Commands:").
    help_tree() {
        local -a path=("$@")
        printf '%s\n\n' "==> nvc ${path[*]}${path:+ }--help"
        local text
        text="$("$nvc" "${path[@]}" --help)"
        printf '%s\n\n' "$text"
        local sub
        for sub in $(printf '%s\n' "$text" | awk '/^Commands:/ {c=1; next} /^$/ {c=0} c {print $1}'); do
            [ "$sub" = help ] || help_tree "${path[@]}" "$sub"
        done
    }
    {
        echo "NVC(1)"
        echo
        echo "NAME"
        echo "    nvc, nvc-runtime, nvc-hook - GPUs for OCI containers (version $version)"
        echo
        echo "SEE ALSO"
        echo "    /usr/share/doc/nvc/README.md, /etc/nvc/config.toml"
        echo
        help_tree
    } >"$doc/nvc.txt"
    chmod 0644 "$doc/nvc.txt"
}

# The newest glibc symbol version the staged binaries use, as dpkg-shlibdeps would find it.
nvc_glibc() {
    local root="$1" b
    for b in "${nvc_binaries[@]}"; do readelf -W --dyn-syms "$root/usr/bin/$b"; done |
        grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n1
}
