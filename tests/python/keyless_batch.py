"""librdkafka producer of one batch mixing keyed and keyless records, for KIP-467 record errors.

Usage: keyless_batch.py BOOTSTRAP TOPIC COUNT
Record n (to partition 0) has key "k<n>" when n is even and no key otherwise; all COUNT records
are queued before the flush so they leave in one batch (linger.ms 2000). Prints
"M <n> <error code>" per delivery report (0 = delivered; librdkafka's code otherwise), "DONE".
"""
import sys

from confluent_kafka import Producer


def main():
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 2000,
            "retries": 0,
            "enable.idempotence": False,
        }
    )
    outcome = {}

    def report(n):
        def cb(err, _msg):
            outcome[n] = 0 if err is None else err.code()

        return cb

    for n in range(count):
        producer.produce(
            topic,
            key=(f"k{n}".encode() if n % 2 == 0 else None),
            value=f"v{n}".encode(),
            partition=0,
            on_delivery=report(n),
        )
    producer.flush(60)
    for n in sorted(outcome):
        print(f"M {n} {outcome[n]}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
