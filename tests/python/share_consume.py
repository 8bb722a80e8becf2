"""librdkafka (confluent-kafka) share consumer: the second client of the share-group tests.

Usage: share_consume.py BOOTSTRAP TOPIC GROUP RECORDS [TIMEOUT_S] [key=value consumer config...]
Subscribes a ShareConsumer of GROUP to TOPIC, polls until RECORDS records arrived or
TIMEOUT_S (default 60) seconds passed (implicit acknowledgement), closes, and prints
"R <partition> <offset> <value>" per record, then "DONE <records> <distinct>".
"""
import sys
import time

from confluent_kafka import ShareConsumer


def main():
    bootstrap, topic, group, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    conf.update(kv.split("=", 1) for kv in sys.argv[6:])
    c = ShareConsumer(conf)
    c.subscribe([topic])
    seen = []
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        msgs = c.poll(1.0)
        if msgs is None:
            continue
        # poll returns a batch of messages (a `Messages` collection).
        for m in msgs:
            if m.error():
                print(f"ERR {m.error()}", flush=True)
                continue
            seen.append((m.partition(), m.offset()))
            print(f"R {m.partition()} {m.offset()} {m.value().decode(errors='replace')}", flush=True)
    c.close()
    print(f"DONE {len(seen)} {len(set(seen))}", flush=True)


if __name__ == "__main__":
    main()
