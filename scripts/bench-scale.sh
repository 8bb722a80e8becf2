#!/usr/bin/env bash
# Mirror scale benchmark (issue 10 item 7): 5,000 partitions (500 topics x 10) on one Apache
# Kafka 4.1.1 source node mirrored by kmirror and by MirrorMaker 2: catch-up time, connections
# to the source, idle CPU and RSS. Not part of CI.
# Usage: scripts/bench-scale.sh [TOPICS=500] [PARTITIONS=10] [RECORDS=20] [IDLE_SECONDS=30]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p kmirror --bin kmirror -p kmirror-benches --bin e2e_scale
export KMIRROR_BIN="$PWD/target/release/kmirror"
uptime
exec target/release/e2e_scale "${1:-500}" "${2:-10}" "${3:-20}" "${4:-30}"
