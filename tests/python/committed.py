"""Prints a group's committed offset per partition: "C <partition> <offset>" (-1001 = none).

Usage: committed.py BOOTSTRAP GROUP TOPIC PARTITIONS
"""
import sys

from confluent_kafka import Consumer, TopicPartition


def main():
    bootstrap, group, topic, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30):
        if tp.error:
            raise SystemExit(f"committed {topic}-{tp.partition}: {tp.error}")
        print(f"C {tp.partition} {tp.offset}")
    c.close()


if __name__ == "__main__":
    main()
