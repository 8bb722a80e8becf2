"""Prints a group's committed offset per partition: "C <partition> <offset>" (-1001 = none).

Usage: committed.py BOOTSTRAP GROUP TOPIC PARTITIONS

Right after the coordinator's node dies, OffsetFetch can answer a retriable error
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) until the
client finds the new coordinator; as an application would, the call is made again then
(for up to 60 s). Any other error fails.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

RETRIABLE = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def main():
    bootstrap, group, topic, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + 60
    while True:
        try:
            got = c.committed(wanted, timeout=30)
            break
        except KafkaException as e:
            err = e.args[0]
            if err.code() not in RETRIABLE or time.monotonic() > deadline:
                raise
            print(f"retrying after {err.str()}", file=sys.stderr)
            time.sleep(0.5)
    for tp in got:
        if tp.error:
            raise SystemExit(f"committed {topic}-{tp.partition}: {tp.error}")
        print(f"C {tp.partition} {tp.offset}")
    c.close()


if __name__ == "__main__":
    main()
