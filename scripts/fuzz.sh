#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain: builds the libFuzzer targets in fuzz/ with
# SanitizerCoverage instrumentation (no nightly, no cargo-fuzz needed), then runs each target
# for SECONDS_PER_TARGET (default 60) from its committed seed corpus and prints, per target,
# executions, seconds, coverage and crashes.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   JOBS=2 scripts/fuzz.sh 600          # two targets at a time
#   scripts/fuzz.sh 0 produce_batch     # build only, then replay the seed corpus once
#
# The working corpus grows in fuzz/target/corpus/<target>/ (seeds stay untouched in
# fuzz/corpus/<target>/); crashers land in fuzz/artifacts/<target>/. Reproduce one with
#   fuzz/target/x86_64-unknown-linux-gnu/release/<target> fuzz/artifacts/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
shift || true
ALL=(produce_batch mirror_append segment_recovery request_decode mirror_api)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")
JOBS=${JOBS:-1}
TRIPLE=x86_64-unknown-linux-gnu

# SanitizerCoverage on stable: the passes libFuzzer reads (8-bit counters, PC table, compare
# tracing), plus the checks a debug build has. --target keeps these flags off build scripts
# and proc macros.
export RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 --cfg fuzzing -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers=yes"
export CARGO_TARGET_DIR="$PWD/fuzz/target"
( cd fuzz && cargo build --release --target "$TRIPLE" --bins )
BIN=fuzz/target/$TRIPLE/release

run_one() {
    local t=$1
    local work=fuzz/target/corpus/$t art=fuzz/artifacts/$t log=fuzz/target/logs/$t.log
    mkdir -p "$work" "$art" fuzz/target/logs
    local args=(-artifact_prefix="$art/" -print_final_stats=1 -rss_limit_mb=4096
        -timeout=20 -max_len=1048576 -detect_leaks=0)
    if [ "$SECS" -eq 0 ]; then
        "$BIN/$t" "${args[@]}" -runs=0 "fuzz/corpus/$t" >"$log" 2>&1 || true
    else
        "$BIN/$t" "${args[@]}" -max_total_time="$SECS" "$work" "fuzz/corpus/$t" \
            >"$log" 2>&1 || true
    fi
    local execs secs cov crashes
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1 || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || true)
    crashes=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
    printf '%-18s executions=%-10s seconds=%-6s cov=%-6s crashes=%s\n' \
        "$t" "${execs:-0}" "${secs:-$SECS}" "${cov:-?}" "$crashes"
}

echo "fuzzing ${TARGETS[*]} for ${SECS}s each (JOBS=$JOBS); logs in fuzz/target/logs/"
running=0
for t in "${TARGETS[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
