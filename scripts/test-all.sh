#!/usr/bin/env bash
# Runs every kmirror test on a fresh machine: installs what the tests need
# (Apache Kafka jars from Maven Central, librdkafka via PyPI confluent-kafka),
# checks formatting and lints, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --release --no-fail-fast
