#!/usr/bin/env bash
# Mirror catch-up benchmark (issue 4 item 10): a GB-sized backlog on an Apache Kafka 4.1.1
# source copied by MirrorMaker 2 (connect-mirror 4.1.1, into a second single-node Kafka) and by
# kmirror (`kmirror mirror create/add`), one after the other on the same source and machine.
# Usage: scripts/bench-mirror.sh [GB=2] [PARTITIONS=8] [MM2_TASKS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p kmirror --bin kmirror -p kmirror-benches --bin e2e_mirror
export KMIRROR_BIN="$PWD/target/release/kmirror"
uptime
exec target/release/e2e_mirror "${1:-2}" "${2:-8}" "${3:-4}"
