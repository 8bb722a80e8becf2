#!/usr/bin/env python3
"""Times librdkafka's commit_transaction against a running broker (kmirror or Kafka).

Usage: scripts/txn-commit-latency.py BOOTSTRAP [TRANSACTIONS]   (default 200)
Each transaction produces one 2-byte record to topic `lat` (create it first, 1 partition),
waits for its delivery, then commits; prints the commit durations' p50, p90, p99 and max.
Needs PyPI confluent-kafka (scripts/setup-deps.sh installs it).
"""
import sys
import time

from confluent_kafka import Producer


def main():
    boot = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    p = Producer({"bootstrap.servers": boot, "transactional.id": "txn-latency", "linger.ms": 35})
    p.init_transactions()
    ds = []
    for _ in range(n):
        p.begin_transaction()
        p.produce("lat", b"hi")
        p.flush()
        t = time.monotonic()
        p.commit_transaction()
        ds.append(1000 * (time.monotonic() - t))
    ds.sort()
    q = lambda f: ds[min(len(ds) - 1, int(len(ds) * f))]
    print(f"{n} commits: p50 {q(0.5):.1f} ms, p90 {q(0.9):.1f} ms, p99 {q(0.99):.1f} ms, max {ds[-1]:.1f} ms")


if __name__ == "__main__":
    main()
