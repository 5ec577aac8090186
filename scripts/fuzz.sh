#!/usr/bin/env bash
# Runs nvc's fuzz targets (fuzz/) for a bounded time each, then merges what they found
# into the committed corpora (fuzz/corpus/<target>/). Not part of the test run.
#
#   scripts/fuzz.sh                      every target, FUZZ_SECONDS (60) each
#   FUZZ_SECONDS=300 scripts/fuzz.sh ldcache spec_edit
#
# Prints, per target: seconds, executions, coverage and features, corpus size before and
# after, and crashes. Exits non-zero when a target crashed; the reproducer is left under
# fuzz/artifacts/<target>/ (replay it with `cargo fuzz run <target> <file>` in fuzz/).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

seconds=${FUZZ_SECONDS:-60}
# Above this many files a corpus is minimised as a whole, not only added to.
max_files=${FUZZ_MAX_CORPUS:-250}
all_targets=(visible_devices capabilities require ldcache runc_args spec_edit)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# The longest input worth trying, per target: a few environment values, a constraint
# list, an ld.so.cache (the small seeds hold every section; larger inputs mostly slow the
# fuzzer down), an argv, a config.json.
max_len() {
    case $1 in
        visible_devices) echo 2048 ;;
        capabilities) echo 256 ;;
        require) echo 512 ;;
        ldcache) echo 4096 ;;
        runc_args) echo 1024 ;;
        spec_edit) echo 16384 ;;
        *) echo "unknown target $1 (known: ${all_targets[*]})" >&2; exit 2 ;;
    esac
}
for t in "${targets[@]}"; do max_len "$t" >/dev/null; done

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
# cargo-fuzz needs nightly-only compiler flags (sanitizers, coverage counters).
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

"${fuzz[@]}" build

logs=$root/fuzz/target/fuzz-logs
mkdir -p "$logs"
summary=()
failed=()
count() { find "$1" -maxdepth 1 -type f | wc -l; }

for t in "${targets[@]}"; do
    corpus=$root/fuzz/corpus/$t
    work=$root/fuzz/target/fuzz-work/$t
    rm -rf "$work"
    mkdir -p "$work" "$corpus"
    cp -r "$corpus"/. "$work"/
    before=$(count "$corpus")
    len=$(max_len "$t")
    dict=()
    [ -f "$root/fuzz/dicts/$t.dict" ] && dict=(-dict="$root/fuzz/dicts/$t.dict")
    echo "== $t: ${seconds}s, max_len $len, corpus $before" >&2
    start=$(date +%s)
    touch "$work.stamp"
    status=0
    "${fuzz[@]}" run "$t" "$work" -- -max_total_time="$seconds" -max_len="$len" \
        -timeout=10 -print_final_stats=1 "${dict[@]}" >"$logs/$t.log" 2>&1 || status=$?
    took=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -n 1)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$logs/$t.log" | tail -n 1 || true)
    # Keep the committed corpus's inputs and add the fewest that reach everything new.
    "${fuzz[@]}" run "$t" "$corpus" "$work" -- -set_cover_merge=1 -max_len="$len" \
        >"$logs/$t.merge.log" 2>&1 || true
    if [ "$(count "$corpus")" -gt "$max_files" ]; then
        # Too many: minimise the whole corpus (cmin), keeping the seeds and regressions.
        fresh=$work.min
        rm -rf "$fresh"
        mkdir -p "$fresh"
        # Edges only (no hit counts): nearly the same coverage from far fewer files.
        "${fuzz[@]}" run "$t" "$fresh" "$corpus" -- -set_cover_merge=1 -use_counters=0 -max_len="$len" \
            >>"$logs/$t.merge.log" 2>&1 || true
        find "$corpus" -maxdepth 1 -type f \( -name 'seed-*' -o -name 'regress-*' \) \
            -exec cp -p {} "$fresh"/ \;
        rm -rf "$corpus"
        mv "$fresh" "$corpus"
    fi
    after=$(count "$corpus")
    crashes=0
    if [ "$status" -ne 0 ]; then
        crashes=$(find "$root/fuzz/artifacts/$t" -maxdepth 1 -type f -newer "$work.stamp" 2>/dev/null | wc -l)
        [ "$crashes" -gt 0 ] || crashes="? (exit $status, see $logs/$t.log)"
        failed+=("$t")
        tail -n 30 "$logs/$t.log" >&2
    fi
    summary+=("$(printf '%-16s %5ss %12s execs  %-22s corpus %4s -> %-4s crashes %s' \
        "$t" "$took" "${execs:-?}" "${cov:-cov ?}" "$before" "$after" "$crashes")")
done

echo
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashed: ${failed[*]}; reproducers under fuzz/artifacts/, logs under $logs" >&2
    exit 1
fi
