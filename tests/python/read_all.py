"""Reads every record of a topic's partitions from the beginning up to the high watermark
seen at start (librdkafka, no group), to show a broker serves what it stores.

Usage: read_all.py BOOTSTRAP TOPIC PARTITIONS [key=value consumer config...]
Prints "END <partition> <high watermark>" per partition, then "DONE <records read>", or
"ERR <error>" and exits 1.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition, OFFSET_BEGINNING


def main():
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "read-all",
        "enable.auto.commit": False,
    }
    for kv in sys.argv[4:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    c = Consumer(conf)
    ends = {}
    for p in range(partitions):
        _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = high
        print(f"END {p} {high}")
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    pos = {p: 0 for p in range(partitions)}
    count = 0
    deadline = time.time() + 120
    while any(pos[p] < ends[p] for p in ends):
        if time.time() > deadline:
            print(f"ERR timeout at {pos} of {ends}")
            sys.exit(1)
        msgs = c.consume(num_messages=10000, timeout=1.0)
        for m in msgs:
            if m.error():
                print(f"ERR {m.error()}")
                sys.exit(1)
            if m.offset() < ends[m.partition()]:
                count += 1
            pos[m.partition()] = m.offset() + 1
    c.close()
    print(f"DONE {count}")


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print(f"ERR {e}")
        sys.exit(1)
