"""Commits one offset for a group without joining it (librdkafka's standalone commit).

Usage: commit_offset.py BOOTSTRAP GROUP TOPIC PARTITION OFFSET [WAIT_SECONDS]
Prints "OK", "ERR <error name>", or "TIMEOUT" if no answer came within WAIT_SECONDS
(default 30; librdkafka keeps retrying retriable errors such as COORDINATOR_NOT_AVAILABLE).
"""
import sys
import time

from confluent_kafka import Consumer, TopicPartition


def main():
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    partition, offset = int(sys.argv[4]), int(sys.argv[5])
    wait = float(sys.argv[6]) if len(sys.argv) > 6 else 30.0
    result = []

    def on_commit(err, parts):
        if err is not None:
            result.append(f"ERR {err.name()}")
            return
        errs = [tp.error for tp in parts if tp.error]
        result.append(f"ERR {errs[0].name()}" if errs else "OK")

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "on_commit": on_commit,
    })
    c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=True)
    deadline = time.time() + wait
    while not result and time.time() < deadline:
        c.poll(0.2)
    print(result[0] if result else "TIMEOUT", flush=True)
    # Don't wait for retries of an unanswered commit on close.
    sys.stdout.flush()
    import os
    os._exit(0)


if __name__ == "__main__":
    main()
