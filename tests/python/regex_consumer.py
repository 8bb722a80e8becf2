"""librdkafka group consumer with a regex subscription, to show which topics it picks up.

Usage: regex_consumer.py BOOTSTRAP GROUP REGEX RECORDS [key=value consumer config...]
Subscribes to REGEX (e.g. "^.*"), reads from the beginning until RECORDS records arrived or
20 s passed. Prints "A <topic>" per distinct topic ever assigned, "R <topic>" per record,
"E <topic> <code>" per consume error, "X <code>" per error callback, "DONE <records>".
"""
import sys
import time

from confluent_kafka import Consumer


def main():
    bootstrap, group, regex, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 1000,
        "error_cb": lambda err: print(f"X {err.code()} {err}", flush=True),
    }
    for kv in sys.argv[5:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    assigned = set()

    def on_assign(consumer, partitions):
        for p in partitions:
            assigned.add(p.topic)

    c = Consumer(conf)
    c.subscribe([regex], on_assign=on_assign)
    got = 0
    deadline = time.time() + 20
    while time.time() < deadline and got < want:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            print(f"E {m.topic()} {m.error().code()}", flush=True)
            continue
        got += 1
        print(f"R {m.topic()}", flush=True)
    # A few more polls so a late assignment of another topic would show.
    end = time.time() + 3
    while time.time() < end:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            print(f"E {m.topic()} {m.error().code()}", flush=True)
        else:
            print(f"R {m.topic()}", flush=True)
    for t in sorted(assigned):
        print(f"A {t}", flush=True)
    c.close()
    print(f"DONE {got}", flush=True)


if __name__ == "__main__":
    main()
