#!/usr/bin/env bash
# The container-start benchmark (docs/performance.md): builds nvc in release mode, then
# runs nvc-bench, which times /bin/true containers through plain runc and through nvc,
# and writes its tables into the document that holds the section (and target/bench/):
# `dev` is in docs/performance-dev.md, `gpu` in docs/performance.md.
# Run as root on Debian: runc, device nodes and mounts need it.
#
#   scripts/bench.sh                                     # fake driver trees: the `dev` section
#   scripts/bench.sh --real --gpus 1,8,64 --section gpu  # the host's real driver
#   scripts/bench.sh --quick                             # a smoke test; no document changes
#
# Every other option goes to nvc-bench (`target/release/nvc-bench --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "bench.sh: run as root (runc, device nodes, mounts)" >&2
    exit 1
fi

section=dev
quick=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
        --quick) quick=1 ;;
        --section) section=${args[$((i + 1))]:-dev} ;;
        --section=*) section=${args[$i]#--section=} ;;
    esac
done
# The document whose markers name the section (nvc-bench --update-doc replaces the text
# between them), found before the build so that a wrong name fails at once.
doc=
if [ "$quick" = 0 ]; then
    for candidate in docs/performance.md docs/performance-dev.md; do
        if grep -qF -- "<!-- bench:$section:start -->" "$candidate"; then
            doc=$candidate
            break
        fi
    done
    if [ -z "$doc" ]; then
        echo "bench.sh: no document has the section '$section'" \
            "(<!-- bench:$section:start --> in docs/performance.md or docs/performance-dev.md)" >&2
        exit 1
    fi
fi

bash scripts/deps.sh runc busybox
cargo build --release --locked --workspace
# The shim and the hook as they are packaged: static (.cargo/config.toml).
cargo build-shim-static
cargo build-hook-static
cargo build-floor-static

mkdir -p target/bench
if [ "$quick" = 1 ]; then
    exec target/release/nvc-bench --out target/bench/quick.md "$@"
fi
exec target/release/nvc-bench --out "target/bench/$section.md" \
    --update-doc "$doc" --section "$section" "$@"
