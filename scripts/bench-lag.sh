#!/usr/bin/env bash
# Mirror lag benchmark (issue 10 item 6): fixed-rate production of 1 KiB records into an
# Apache Kafka 4.1.1 source; each record's lag (destination-visible time - CreateTime) for
# kmirror and MirrorMaker 2 in alternating order over several rounds. Not part of CI.
# Usage: scripts/bench-lag.sh [RATES_MB=10,50] [ROUNDS=3] [PARTITIONS=32] [SECONDS=20]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p kmirror --bin kmirror -p kmirror-benches --bin e2e_lag
export KMIRROR_BIN="$PWD/target/release/kmirror"
uptime
exec target/release/e2e_lag "${1:-10,50}" "${2:-3}" "${3:-32}" "${4:-20}"
