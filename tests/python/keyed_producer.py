"""librdkafka producer of keyed records with duplicate header keys, in rounds, for compacted
topics (many versions of few keys) and the mirroring tests.

Usage: keyed_producer.py BOOTSTRAP TOPIC PARTITIONS ROUNDS PER_ROUND KEYS SLEEP_MS [key=value config...]
Round r writes PER_ROUND records, key "key-<n % KEYS>" when n // PARTITIONS is even and a
unique key "u<r>-<n>" otherwise (so cleaning leaves interior offset gaps in every partition), value "r<r>:n<n>:" padded to 80 bytes,
headers [("dup", "1"), ("dup", "2")], to partition n % PARTITIONS; flushes and sleeps SLEEP_MS
between rounds (so time-based segment rolls happen). Prints "ROUND <r>" per round, "DONE".
"""
import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, rounds, per_round, keys, sleep_ms = (int(x) for x in sys.argv[3:8])
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    for kv in sys.argv[8:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    producer = Producer(conf)
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(str(err))

    for r in range(rounds):
        for n in range(per_round):
            producer.produce(
                topic,
                key=(f"key-{n % keys}" if (n // partitions) % 2 == 0 else f"u{r}-{n}").encode(),
                value=f"r{r}:n{n}:".ljust(80, ".").encode(),
                partition=n % partitions,
                headers=[("dup", b"1"), ("dup", b"2")],
                on_delivery=report,
            )
            producer.poll(0)
        producer.flush(60)
        print(f"ROUND {r}", flush=True)
        time.sleep(sleep_ms / 1000.0)
    if errors:
        print(f"ERRORS {len(errors)} {errors[0]}", flush=True)
        sys.exit(1)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
