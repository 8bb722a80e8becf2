#!/usr/bin/env bash
# Broker benchmark (issue 3 item 7): ProducerPerformance + ConsumerPerformance (kafka-tools
# 4.1.1) against Apache Kafka 4.1.1 and kmirror on this machine, in one run, with a warm-up.
# Usage: scripts/bench-broker.sh [RECORDS=500000] [PARTITIONS=6]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p kmirror --bin kmirror -p kmirror-benches --bin e2e_broker
export KMIRROR_BIN="$PWD/target/release/kmirror"
uptime
exec target/release/e2e_broker "${1:-500000}" "${2:-6}"
