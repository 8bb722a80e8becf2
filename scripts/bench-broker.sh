#!/usr/bin/env bash
# Broker benchmark (issue 3 item 7): ProducerPerformance + ConsumerPerformance (kafka-tools
# 4.1.1) against Apache Kafka 4.1.1 and kmirror on this machine, in one run, with a warm-up.
# Usage: scripts/bench-broker.sh [RECORDS=500000] [PARTITIONS=6]
#        scripts/bench-broker.sh --tls [RECORDS=100000] [PARTITIONS=6] [ROUNDS=3]
#   (--tls: the same tools over SSL against both brokers, alternating, ROUNDS rounds; also
#   prices TLS on each broker's fetch path against PLAINTEXT)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p kmirror --bin kmirror -p kmirror-benches --bin e2e_broker
export KMIRROR_BIN="$PWD/target/release/kmirror"
uptime
if [ "${1:-}" = "--tls" ]; then
  exec target/release/e2e_broker --tls "${2:-100000}" "${3:-6}" "${4:-3}"
fi
exec target/release/e2e_broker "${1:-500000}" "${2:-6}"
