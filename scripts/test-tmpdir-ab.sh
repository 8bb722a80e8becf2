#!/usr/bin/env bash
# Times one integration-test file with its data on disk (/tmp) and on tmpfs (/dev/shm),
# the two sides alternating over ROUNDS rounds: the check behind test-all.sh's tmpfs choice.
# Usage: scripts/test-tmpdir-ab.sh [TEST_FILE] (default cluster_membership; ROUNDS=2).
# Needs the `ci` build (`cargo build --profile ci --workspace --bins --tests`).
set -euo pipefail
cd "$(dirname "$0")/.."
test=${1:-cluster_membership}
export KMIRROR_BIN=$PWD/target/ci/kmirror
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in disk shm; do
    if [ "$side" = shm ]; then d=$(mktemp -d /dev/shm/ab.XXXXXX); else d=$(mktemp -d /tmp/ab.XXXXXX); fi
    start=$(date +%s.%N)
    rc=0
    TMPDIR=$d cargo test -q --profile ci --workspace --test "$test" >"$d.log" 2>&1 || rc=$?
    end=$(date +%s.%N)
    printf 'round %s %-4s exit %s %6.1f s\n' "$r" "$side" "$rc" "$(echo "$end - $start" | bc)"
    rm -rf "$d" "$d.log"
  done
done
