#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain: cargo fuzz (libFuzzer)
# with no sanitizer, which needs no nightly (safe Rust gains little from
# ASan, and overflow checks stay on through -a, debug assertions).
#
#   bash fuzz/run.sh TARGET SECONDS     one target
#   bash fuzz/run.sh all SECONDS        every target, one after the other
#                                       (FUZZ_JOBS=N: N at a time)
#
# Installs cargo-fuzz if missing, builds the targets, and runs each from
# the committed seed corpus fuzz/corpus/<target>/ (read only) plus a work
# corpus fuzz/work/<target>/ (kept between runs, not committed). Prints,
# per target: executions, exec/s, coverage (libFuzzer's edge count `cov`
# and feature count `ft`), corpus size and CPU seconds. Exits non-zero if a
# target fails; the failing input is in fuzz/artifacts/<target>/ (see
# fuzz/README.md for turning it into a regression test).
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

if [ $# -ne 2 ]; then
    echo "usage: $0 TARGET|all SECONDS" >&2
    exit 2
fi
what="$1"
secs="$2"
targets=(frame_decoder utf8 handshake deflate conn hub driver inbox receive receive_in)
if [ "$what" != all ]; then
    case " ${targets[*]} " in
    *" $what "*) targets=("$what") ;;
    *) echo "unknown target $what (one of: ${targets[*]})" >&2; exit 2 ;;
    esac
fi

# libFuzzer is C++, built by libfuzzer-sys's build script.
if ! command -v c++ >/dev/null; then
    apt-get update -qq && apt-get install -y -qq g++ >/dev/null
fi
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

flags=(--sanitizer none --debug-assertions)
start=$SECONDS
cargo fuzz build "${flags[@]}"
echo "build: $((SECONDS - start)) s"

# run_target T: fuzzes T for $secs seconds and writes its summary line to
# artifacts/T/summary (with FAILED when libFuzzer found a crash).
run_target() {
    local t=$1 log rc=0 user sys cpu last cov ft corp runs eps line
    mkdir -p "work/$t" "artifacts/$t"
    log="artifacts/$t/run.log"
    echo "== $t: $secs s"
    TIMEFORMAT="%U %S"
    { time cargo fuzz run "${flags[@]}" "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -max_len=4096 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" >"$log" 2>&1 || rc=$?; } 2>"artifacts/$t/cpu"
    read -r user sys <"artifacts/$t/cpu"
    cpu=$(python3 -c "print(round($user + $sys, 1))")
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    line="$t: runs=${runs:-?} exec/s=${eps:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?} cpu=${cpu}s"
    if [ "$rc" -ne 0 ]; then
        line="$line FAILED (exit $rc)"
        grep -E 'panicked|SUMMARY|Test unit written|ERROR' "$log" | head -5 || true
    fi
    echo "$line" >"artifacts/$t/summary"
}

# FUZZ_JOBS targets at once (default 1): each libFuzzer process is one
# thread, so CI runs two on its two cores.
jobs=${FUZZ_JOBS:-1}
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_target "$t" &
    running=$((running + 1))
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
    line=$(cat "artifacts/$t/summary" 2>/dev/null || echo "$t: no result")
    summary+=("$line")
    [[ $line == *FAILED* || $line == *"no result"* ]] && failed+=("$t")
done

echo "== summary ($((SECONDS - start)) s in all)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -ne 0 ]; then
    echo "failing targets: ${failed[*]} (inputs in fuzz/artifacts/<target>/)" >&2
    exit 1
fi
