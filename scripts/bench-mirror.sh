#!/usr/bin/env bash
# Mirror catch-up benchmark (issue 4 item 10, issue 10 step 8): a GB-sized backlog on broker 1
# of a 2-broker Apache Kafka 4.1.1 cluster, copied to the end by kmirror (`kmirror mirror
# create/add`), by MirrorMaker 2 (connect-mirror 4.1.1 into a second single-node Kafka, its
# consumer and producer tuned) and, as a reference, by Kafka's own follower replication (a
# replica added on broker 2). A warm-up round (discarded) and ROUNDS measured rounds, the
# copiers' order rotating each round; prints per-round figures, medians and min-max.
# Manual only: CI does not run benchmarks.
# Usage: scripts/bench-mirror.sh [GB=2] [PARTITIONS=8] [MM2_TASKS=4] [ROUNDS=3]
# PROFILE=release builds with LTO; the default is the `ci` profile (BENCHMARKS.md's figures).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-ci}"
scripts/setup-deps.sh
cargo build --profile "$profile" -p kmirror --bin kmirror
cargo build --profile "$profile" -p kmirror-benches --bin e2e_mirror
export KMIRROR_BIN="$PWD/target/$profile/kmirror"
uptime
exec "target/$profile/e2e_mirror" "${1:-2}" "${2:-8}" "${3:-4}" "${4:-3}"
