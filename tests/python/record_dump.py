"""Reads a topic in a consumer group with librdkafka (subscribe, then commit), printing what
the broker advertised and every record, so tests can compare records at offsets and see that
the group coordinator found through FindCoordinator is reachable.

Usage: record_dump.py BOOTSTRAP TOPIC PARTITIONS [key=value consumer config...]
Prints "BROKER <id> <host> <port>" per broker in Metadata, "R <partition> <offset> <key>
<value>" per record below the high watermark seen at start, "COMMITTED" once the group's
offsets are committed, then "DONE <records>"; or "ERR <error>" and exits 1.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def text(b):
    return "-" if b is None else b.decode("utf-8", "replace").replace(" ", "_")


def main():
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "record-dump",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    for kv in sys.argv[4:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    c = Consumer(conf)
    md = c.list_topics(topic, timeout=30)
    for b in sorted(md.brokers.values(), key=lambda b: b.id):
        print(f"BROKER {b.id} {b.host} {b.port}")
    ends = {}
    for p in range(partitions):
        _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = high
    c.subscribe([topic])
    pos = {p: 0 for p in range(partitions)}
    lines = []
    deadline = time.time() + 120
    while any(pos[p] < ends[p] for p in ends):
        if time.time() > deadline:
            print(f"ERR timeout at {pos} of {ends}")
            sys.exit(1)
        for m in c.consume(num_messages=10000, timeout=1.0):
            if m.error():
                print(f"ERR {m.error()}")
                sys.exit(1)
            if m.offset() < ends[m.partition()]:
                lines.append(f"R {m.partition()} {m.offset()} {text(m.key())} {text(m.value())}")
            pos[m.partition()] = m.offset() + 1
    c.commit(asynchronous=False)
    print("COMMITTED")
    c.close()
    print("\n".join(lines))
    print(f"DONE {len(lines)}")


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print(f"ERR {e}")
        sys.exit(1)
