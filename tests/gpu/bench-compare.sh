#!/usr/bin/env bash
# Two builds of nvc timed against each other on the GPU machine: nvc-bench of the build in
# .device-carry/old (a base commit, built by tests/gpu/prepare.sh with NVC_OLD_COMMIT set)
# and of .device-carry/bin, alternated ROUNDS times on the same rootfs and runc, so that a
# change's cost on the GPU container start is read from runs made side by side.
# Usage: tests/gpu/bench-compare.sh OUT_DIR [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=$PWD/.device-carry
out=${1:?usage: bench-compare.sh OUT_DIR [ROUNDS]}
rounds=${2:-3}
mkdir -p "$out"
install -m 0755 "$carry/runc/usr/sbin/runc" /usr/local/sbin/runc
cp -a "$carry"/runc/usr/lib/x86_64-linux-gnu/libseccomp.so.2* /usr/local/lib/ && ldconfig
# The median and added wall-clock ms of one row of an nvc-bench table.
row() { grep -F "| $2 |" "$1" | head -1 | awk -F'|' '{gsub(/ /,"",$3); gsub(/ /,"",$6); print $3, $6}'; }
printf '%-5s %-4s %-10s %-10s %-10s %-10s\n' round, build, 'start ms' 'added ms' 'hook ms' 'shim ms'
for i in $(seq "$rounds"); do
    for build in old new; do
        dir=$carry/bin; commit=$(cat "$carry/commit")
        if [ $build = old ]; then dir=$carry/old; commit=$(cat "$carry/old/commit"); fi
        file=$out/bench-$build-$i.txt
        NVC_BENCH_COMMIT=$commit "$dir/nvc-bench" --real --rootfs "$carry/bench/rootfs" \
            --runc /usr/local/sbin/runc --runs 30 --libs 0 --out "$file" >"$file.log" 2>&1 ||
            { echo "nvc-bench ($build) failed:"; tail -5 "$file.log"; continue; }
        read -r start added < <(row "$file" "nvc-runtime, all GPUs, utility,compute")
        read -r hook _ < <(row "$file" "nvc-hook prestart, all GPUs, utility,compute")
        read -r shim _ < <(row "$file" "nvc-runtime create, all GPUs, utility,compute")
        printf '%-5s %-4s %-10s %-10s %-10s %-10s\n' "$i" "$build" "$start" "$added" "$hook" "$shim"
    done
done
