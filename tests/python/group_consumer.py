"""librdkafka (confluent-kafka) twin of tests/java/src/GroupConsumer.java.

Usage: group_consumer.py BOOTSTRAP GROUP TOPIC STOP_FILE RATE_PER_SEC [key=value config...]
Commits synchronously after each batch and on revocation; prints "R <partition> <offset>
<partition>:<seq>", "ASSIGNED <p,...>", "REVOKED <p,...>", "CLOSED".
"""
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException


def ids(parts):
    return ",".join(sorted(str(tp.partition) for tp in parts))


COORDINATOR_MOVING = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
}


def commit(consumer):
    """Synchronous commit; a retriable failure (the coordinator moved or is loading, as when
    a broker dies) is retried for up to a minute, as the Java consumer's commitSync does."""
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as e:
            err = e.args[0]
            # librdkafka does not flag a commit failed by the coordinator's error as retriable
            # (seen on Kafka: "Commit failed: Broker: Coordinator load in progress" after the
            # coordinator's node was killed).
            retriable = err.retriable() or err.code() in COORDINATOR_MOVING
            if not retriable or time.monotonic() > deadline:
                raise
            print(f"commit retry after: {err}", file=sys.stderr, flush=True)
            time.sleep(0.2)


def main():
    bootstrap, group, topic, stop_file, rate = sys.argv[1:6]
    rate = int(rate)
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
    }
    for kv in sys.argv[6:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    if conf.get("group.protocol") == "consumer":
        # KIP-848: the broker owns these.
        conf.pop("session.timeout.ms")
        conf.pop("heartbeat.interval.ms")
    consumer = Consumer(conf)

    def on_assign(c, parts):
        print(f"ASSIGNED {ids(parts)}", flush=True)

    def on_revoke(c, parts):
        # Commit what we processed before the partitions move to another member.
        try:
            c.commit(asynchronous=False)
        except KafkaException as e:
            # Nothing consumed since the last commit: nothing to commit.
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise
        print(f"REVOKED {ids(parts)}", flush=True)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    started = time.monotonic()
    consumed = 0
    while not os.path.exists(stop_file):
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        lines = []
        got = False
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise SystemExit(f"consume error: {m.error()}")
            v = m.value().decode("ascii")
            key = ":".join(v.split(":", 2)[:2])
            lines.append(f"R {m.partition()} {m.offset()} {key}\n")
            consumed += 1
            got = True
        if lines:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
        if got:
            commit(consumer)
        if rate > 0:
            due = consumed / rate
            lag = due - (time.monotonic() - started)
            if lag > 0:
                time.sleep(lag)
    consumer.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main()
