#!/usr/bin/env bash
# The test suite, in two tiers (CONTRIBUTING.md). Every test program is built once, by
# one `cargo test --no-run`, then run straight from target/, several at a time.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
usage: scripts/test.sh [--quick] [--jobs N]

  (none)      The whole suite, as root on Debian (the README's test command, and CI's):
              installs what it needs (scripts/deps.sh), checks formatting, builds once
              with clippy's lints, runs the quick tier's tests and stops if one fails,
              then every test that needs root or the network, several programs at once,
              with the aarch64 build (scripts/cross-aarch64.sh) and the docs beside them;
              the engine roots and the OCI validation programs are made while cargo
              builds. Prints each phase's time at the end.
  --quick     The quick tier, without root or network: formatting, the build (with
              the lints), the unit tests and the suites on the committed driver trees.
              A test that needs root or the network is ignored there, with the reason
              libtest prints beside it (`#[ignore = "needs root: ..."]`), and counted as
              skipped, never as passed.
  --jobs N    How many test programs run at once (default 4).
  -h, --help  This text.

Logs: target/test-logs/<tier>/<program>.log. One suite by hand: cargo test -p nvc-tests
--test NAME -- --include-ignored (as root; tests/README.md lists the suites).
EOF
}

quick=false
jobs=4
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=true ;;
        --jobs)
            [ $# -ge 2 ] && [ "$2" -gt 0 ] 2>/dev/null || {
                echo "test.sh: --jobs needs a number above 0" >&2
                exit 2
            }
            jobs=$2
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "test.sh: unknown argument $1" >&2
            usage >&2
            exit 2
            ;;
    esac
    shift
done

logs=$PWD/target/test-logs
mkdir -p "$logs"
times=()
# `timed NAME COMMAND...`: runs the command and notes how long it took.
timed() {
    local name=$1 start=$SECONDS status=0
    shift
    "$@" || status=$?
    times+=("$(printf '%-34s %4d s' "$name" $((SECONDS - start)))")
    return $status
}
print_times() {
    echo
    echo "phase times:"
    printf '  %s\n' "${times[@]}"
    # What ran beside the build, from the files its jobs wrote.
    local f
    $quick || for f in "$logs"/background/*.time; do
        [ -e "$f" ] && printf '  %-34s %4d s (beside the build)\n' "$(basename "$f" .time)" "$(cat "$f")"
    done
    printf '  %-34s %4d s\n' "total" "$SECONDS"
}

if $quick; then
    timed "tools" bash scripts/deps.sh --quick
else
    timed "tools (scripts/deps.sh)" bash scripts/deps.sh
    if [ "$(id -u)" != 0 ]; then
        echo "warning: not root; the tests that need root will fail and say so (--quick skips them)" >&2
    fi
    # Made while cargo builds, once per machine (/var/cache/nvc-tests): the Debian roots
    # the engine tests run newer engines in, and the OCI validation programs. When one
    # cannot be made, the suites that need it fail and say why; the others still run.
    rm -rf "$logs/background"
    mkdir -p "$logs/background"
    background() {
        local name=$1 start=$SECONDS
        shift
        "$@" >"$logs/background/$name.log" 2>&1 ||
            echo "warning: $name failed (its suites will say why): see $logs/background/$name.log" >&2
        echo $((SECONDS - start)) >"$logs/background/$name.time"
    }
    background "engine roots (debootstrap)" bash scripts/engine-roots.sh &
    background "OCI validation programs" bash scripts/oci-suite.sh &
fi

# Formatting, as the house style asks. A cargo without rustfmt or clippy (Debian's
# cargo-web) cannot check it or the lints: said loudly rather than passed in silence.
if cargo fmt --version >/dev/null 2>&1; then
    timed "formatting" cargo fmt --all --check
else
    echo "NOT CHECKED: formatting (this cargo has no rustfmt; rust-toolchain.toml names it)" >&2
fi

# The lints are checked by the build itself: clippy-driver compiles the workspace's own
# crates (rustc's code, with clippy's lints on top, warnings as errors), which costs the
# build almost nothing where a separate `cargo clippy` checks every dependency again.
# The same wrapper for every cargo run here, the quick tier's too, so that neither
# rebuilds what the other built; a plain `cargo build` afterwards rebuilds the workspace's
# crates once (not their dependencies).
if cargo clippy --version >/dev/null 2>&1 && driver=$(command -v clippy-driver); then
    export RUSTC_WORKSPACE_WRAPPER=$driver
    export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
    build_name="build, lints (clippy-driver)"
else
    echo "NOT CHECKED: lints (this cargo has no clippy; rust-toolchain.toml names it)" >&2
    build_name="build (no lints)"
fi

# A first build (no target/debug yet, as in a fresh clone) is not incremental: incremental
# compilation only pays back on the next build, and costs the first one its caches.
[ -d target/debug ] || export CARGO_INCREMENTAL=0
# The one build: every test program and every binary the suites run (`cargo test` alone
# builds a package's binaries only for its own integration tests: not `nvc`); then the
# test programs' list, from the build just made.
build() {
    cargo build --workspace --all-targets --locked &&
        cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
            >"$logs/build.json"
}
timed "$build_name" build
# "NAME KIND PACKAGE-DIR EXECUTABLE" for each test program, longest-running suites first
# (by the last run's times on this machine, else by the list below), so that the last
# to finish is a short one.
programs() {
    sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml","target":{"kind":\["\([a-z-]*\)"\][^}]*"name":"\([^"]*\)".*"profile":{[^}]*"test":true[^}]*}.*"executable":"\([^"]*\)".*/\3 \2 \1 \4/p' \
        "$logs/build.json"
}
# Seconds each long job took in a whole run on a 2-core machine, for a first run
# (engines@crio: beside two other engine suites on 2 cores, not yet in a whole run).
default_times="oci_validation 238 engines@deb 184 hostile@races 175 engines@containerd 132
engines@docker 131 faults@bad_input 120 engines@crun 106 engines@cri 96 hostile@links 78
engines@podman 68 nvc_host@container 53 engines@rootless 44 engines@node 40 faults@startup 28
engines@crio 20 leases 15"
order() {
    local name rest weight
    while read -r name rest; do
        weight=$(awk -v n="$name" '$1 == n { print $2 }' "$logs/last-times" 2>/dev/null || true)
        if [ -z "$weight" ]; then
            weight=$(echo $default_times | xargs -n 2 | awk -v n="$name" '$1 == n { print $2 }')
        fi
        echo "${weight:-0} $name $rest"
    done | sort -k1,1nr -s | cut -d' ' -f2-
}
programs | order >"$logs/programs"
[ -s "$logs/programs" ] || {
    echo "test.sh: the build named no test program (see $logs/build.json)" >&2
    exit 1
}

# One test program: `run_program TIER NAME KIND DIR EXE [ARGS...]`, its output in
# $logs/TIER/NAME.log and its seconds in NAME.time; prints its result line. $AS_NOBODY
# (the quick tier run by root): in a network namespace of its own, as nobody, with no
# capability, in a home of its own.
run_program() {
    local tier=$1 name=$2 kind=$3 dir=$4 exe=$5 start=$SECONDS status=0
    shift 5
    local log=$LOGS/$tier/$name-$kind.log
    local as=()
    if [ -n "${AS_NOBODY:-}" ]; then
        as=(unshare --net -- setpriv --reuid=65534 --regid=65534 --clear-groups
            env HOME="$AS_NOBODY" TMPDIR="$AS_NOBODY")
    fi
    # `times`: the CPU of the program and what it waited for (user, system).
    (
        cd "$dir" && CARGO_MANIFEST_DIR=$dir "${as[@]}" "$exe" "$@"
        s=$?
        times >"${log%.log}.cpu"
        exit $s
    ) </dev/null >"$log" 2>&1 || status=$?
    echo $((SECONDS - start)) >"${log%.log}.time"
    local result
    result=$(grep '^test result:' "$log" | tail -n 1 || true)
    [ -n "$result" ] || result="test result: FAILED. (exit status $status, no result line)"
    [ $status = 0 ] || case "$result" in *FAILED*) ;; *) result="test result: FAILED. (exit status $status) $result" ;; esac
    printf '     Running %s (%s, %d s; CPU user, system: %s)\n%s\n' "$name" "$kind" \
        $((SECONDS - start)) "$(tail -n 1 "${log%.log}.cpu" 2>/dev/null)" "$result"
}
export -f run_program
export LOGS=$logs

# `run_tier TIER`: the programs of $logs/TIER.list (with their arguments), $jobs at a time.
# The jobs named in $logs/TIER.alone run after the others, one at a time: the race of
# hostile/races.rs, whose racer spins a core for as long as the race lasts, and whose
# starts are slow while other programs share the machine (on 2 cores: about 250 s and
# 180 CPU-s beside them, about 85 s alone).
run_tier() {
    local tier=$1
    rm -rf "${logs:?}/$tier"
    mkdir -p "$logs/$tier"
    # shellcheck disable=SC2016
    xargs -P "$jobs" -L 1 bash -c 'run_program "$@"' _ "$tier" <"$logs/$tier.list" || true
    if [ -s "$logs/$tier.alone" ]; then
        # shellcheck disable=SC2016
        xargs -P 1 -L 1 bash -c 'run_program "$@"' _ "$tier" <"$logs/$tier.alone" || true
    fi
}

# Sums of the result lines of a tier: "PASSED FAILED IGNORED BROKEN", BROKEN being the
# programs that failed without a test failing (a crash, a bad argument).
tally() {
    local tier=$1 passed=0 failed=0 ignored=0 broken=0 log line p f i
    for log in "$logs/$tier"/*.log; do
        line=$(grep '^test result:' "$log" | tail -n 1 || true)
        if [ -z "$line" ]; then
            broken=$((broken + 1))
            continue
        fi
        p=$(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<<"$line")
        f=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")
        i=$(sed -n 's/.* \([0-9]*\) ignored.*/\1/p' <<<"$line")
        passed=$((passed + p))
        failed=$((failed + f))
        ignored=$((ignored + i))
    done
    echo "$passed $failed $ignored $broken"
}

# What failed in a tier: each failing program's failures, as libtest printed them.
report_failures() {
    local tier=$1 log
    for log in "$logs/$tier"/*.log; do
        if ! grep -q '^test result: ok\.' "$log"; then
            echo
            echo "==== $(basename "$log" .log) ($log) ===="
            if grep -q '^failures:$' "$log"; then
                sed -n '/^failures:$/,$p' "$log"
            else
                tail -n 40 "$log"
            fi
        fi
    done
}

# The quick tier: every program without the ignored tests (those needing root, the
# network or a tool the quick tier does not install): the unit tests and the suites on the
# committed driver trees. Run by root, it runs them as a contributor would, without root
# or network, so that a test needing either and not marked so fails here.
cp "$logs/programs" "$logs/quick.list"
export AS_NOBODY=
if [ "$(id -u)" = 0 ]; then
    first_exe=$(head -n 1 "$logs/quick.list" | cut -d' ' -f4)
    if setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$first_exe" 2>/dev/null &&
        unshare --net true 2>/dev/null; then
        nobody_home=$(mktemp -d /tmp/nvc-quick.XXXXXX)
        chown 65534:65534 "$nobody_home"
        trap 'rm -rf "$nobody_home"' EXIT
        AS_NOBODY=$nobody_home
    else
        echo "note: the quick tier runs as root here: nobody cannot reach $first_exe" >&2
    fi
fi
echo
echo "quick tier: $(wc -l <"$logs/quick.list") test programs, $jobs at a time${AS_NOBODY:+, as nobody without network}"
timed "quick tier's tests" run_tier quick
read -r q_passed q_failed q_ignored q_broken <<<"$(tally quick)"
if [ "$q_failed" != 0 ] || [ "$q_broken" != 0 ]; then
    report_failures quick
    print_times
    echo
    echo "quick tier: $q_passed passed, $q_failed failed, $q_broken programs broken; $q_ignored skipped (they need root, the network or a tool)"
    exit 1
fi

if $quick; then
    echo
    echo "skipped in the quick tier (they run in ./scripts/test.sh), by reason:"
    cat "$logs"/quick/*.log | sed -n 's/^test .* \.\.\. ignored, \(.*\)$/\1/p' | sort | uniq -c | sort -nr |
        sed 's/^ */  /'
    print_times
    echo
    echo "quick tier: $q_passed passed, 0 failed; $q_ignored skipped (they need root, the network or a tool; not counted as passed)"
    exit 0
fi

# The aarch64 build (for tests/tests/arm64.rs) and the docs run beside the rest of the
# tests, one after the other: each holds cargo's lock on target/.
docs_check() {
    local status=0
    # This subshell's own phases, written out for the summary.
    times=()
    timed "aarch64 build (scripts/cross-aarch64.sh)" bash scripts/cross-aarch64.sh || status=1
    # Doc links stay true when code moves.
    RUSTDOCFLAGS="-D warnings" timed "docs (cargo doc)" \
        cargo doc --workspace --no-deps --document-private-items --locked --quiet || status=1
    printf '%s\n' "${times[@]}" >"$logs/docs-times"
    return $status
}
docs_check >"$logs/docs.log" 2>&1 &
docs=$!

# The rest: the tests the quick tier skipped, in the programs that have any, one job a
# module (`--exact` names), so that a long suite (engines, hostile) is spread out too.
: >"$logs/full.list"
while read -r name kind dir exe; do
    grep -q '^test result:.* [1-9][0-9]* ignored' "$logs/quick/$name-$kind.log" || continue
    (cd "$dir" && "$exe" --list --ignored) </dev/null 2>/dev/null | sed -n 's/: test$//p' \
        >"$logs/ignored-tests"
    for module in $(awk -F'::' '{ print (NF > 1 ? $1 : "-") }' "$logs/ignored-tests" | sort -u); do
        if [ "$module" = - ]; then
            names=$(grep -v '::' "$logs/ignored-tests" | tr '\n' ' ')
            job=$name
        else
            names=$(grep "^$module::" "$logs/ignored-tests" | tr '\n' ' ')
            job=$name@$module
        fi
        echo "$job $kind $dir $exe --ignored --exact $names"
    done
done <"$logs/programs" | order >"$logs/full.jobs"
grep '^hostile@races ' "$logs/full.jobs" >"$logs/full.alone" || true
# The aarch64 tests last of the others: they wait for the aarch64 build beside them.
{ grep -v '^hostile@races \|^arm64 ' "$logs/full.jobs"; grep '^arm64 ' "$logs/full.jobs"; } \
    >"$logs/full.list" || true
AS_NOBODY=
echo
echo "the tests the quick tier skipped: $(cat "$logs/full.list" "$logs/full.alone" | wc -l) test programs, $jobs at a time (the race alone, last)"
timed "tests needing root or the network" run_tier full
read -r f_passed f_failed f_ignored f_broken <<<"$(tally full)"

docs_status=0
wait "$docs" || docs_status=$?
while read -r line; do times+=("$line"); done <"$logs/docs-times"
cat "$logs/docs.log"

# This run's times order the next run's programs.
for t in "$logs"/quick/*.time "$logs"/full/*.time; do
    n=$(basename "$t" .time)
    echo "${n%-*} $(cat "$t")"
done | awk '{ s[$1] += $2 } END { for (n in s) print n, s[n] }' >"$logs/last-times"

[ "$f_failed" = 0 ] && [ "$f_broken" = 0 ] || report_failures full
print_times
passed=$((q_passed + f_passed))
failed=$((q_failed + f_failed))
broken=$((q_broken + f_broken))
echo
echo "all tests: $passed passed, $failed failed, $f_ignored ignored; $broken programs broken"
if [ "$failed" != 0 ] || [ "$broken" != 0 ] || [ "$docs_status" != 0 ]; then
    [ "$docs_status" = 0 ] || echo "the aarch64 build or the docs failed (above)"
    exit 1
fi
