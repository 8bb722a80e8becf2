"""A librdkafka client that asks a broker the moment its listener opens: CreateTopics, then
produce RECORDS records (acks=all) to the new topic, each through BOOTSTRAP only.

Usage: early_client.py BOOTSTRAP TOPIC RECORDS [REPLICATION_FACTOR=-1, the broker's default]
Prints "CREATED <topic> <ms>", "ACKED <n> <ms>", or "FAILED <step> <error>" (exit 1).
"""
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    bootstrap, topic, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rf = int(sys.argv[4]) if len(sys.argv) > 4 else -1
    t0 = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for name, fut in admin.create_topics([NewTopic(topic, 1, rf)], operation_timeout=30, request_timeout=40).items():
            fut.result(timeout=60)
    except Exception as e:  # noqa: BLE001 - report any failure as the test's evidence
        print(f"FAILED create {e}", flush=True)
        sys.exit(1)
    print(f"CREATED {topic} {int((time.monotonic() - t0) * 1000)}", flush=True)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    acked = []
    errors = []

    def report(err, msg):
        (errors if err else acked).append(err or msg.offset())

    for i in range(records):
        producer.produce(topic, value=f"early-{i}".encode(), on_delivery=report)
    producer.flush(90)
    if errors or len(acked) != records:
        print(f"FAILED produce {len(acked)} acked, errors {errors[:3]}", flush=True)
        sys.exit(1)
    print(f"ACKED {len(acked)} {int((time.monotonic() - t0) * 1000)}", flush=True)


if __name__ == "__main__":
    main()
