#!/usr/bin/env bash
# Installs the real parts the tests use. Idempotent; cached under ~/.m2 and the
# Python user site. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
# Python librdkafka client (confluent-kafka wheels bundle librdkafka).
python3 -c 'import confluent_kafka' 2>/dev/null || python3 -m pip install --quiet 'confluent-kafka>=2.6'
