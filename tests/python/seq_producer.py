"""librdkafka (confluent-kafka) twin of tests/java/src/SeqProducer.java.

Usage: seq_producer.py BOOTSTRAP TOPIC PARTITIONS RECORDS [key=value producer config...]
(seqproducer.rate=N: at most N records per second; seqproducer.stop=PATH: stop sending once
PATH exists, then flush and finish; both ours, not librdkafka's.)
Prints "ACK <partition> <seq> <offset>" per acknowledged record, "ERR <partition> <seq>
<error>" per failed one, and "DONE <acked> <errors>" at the end.
"""
import os
import sys
import time

from confluent_kafka import Producer


def value(partition, seq):
    # Same layout as SeqFormat.java: "<partition>:<seq>:" padded with '.' to 100 bytes.
    return f"{partition}:{seq}:".ljust(100, ".").encode("ascii")


def main():
    bootstrap, topic, partitions, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "queue.buffering.max.messages": 200000,
    }
    for kv in sys.argv[5:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    rate = float(conf.pop("seqproducer.rate", 0))
    stop = conf.pop("seqproducer.stop", None)
    producer = Producer(conf)
    started = time.monotonic()
    out = []
    counts = {"acked": 0, "errors": 0}

    def report(p, seq):
        def cb(err, msg):
            if err is None:
                counts["acked"] += 1
                out.append(f"ACK {p} {seq} {msg.offset()}\n")
            else:
                counts["errors"] += 1
                out.append(f"ERR {p} {seq} {err.name()}\n")
        return cb

    for i in range(records):
        if stop is not None and i % 50 == 0 and os.path.exists(stop):
            break
        # Serve delivery reports while pacing, so acks keep flowing out.
        while rate > 0 and (wait := started + i / rate - time.monotonic()) > 0:
            producer.poll(wait)
            if out:
                sys.stdout.write("".join(out))
                sys.stdout.flush()
                out.clear()
        p, seq = i % partitions, i // partitions
        while True:
            try:
                producer.produce(topic, value(p, seq), partition=p, on_delivery=report(p, seq))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
            if out:
                sys.stdout.write("".join(out))
                sys.stdout.flush()
                out.clear()
    deadline = time.monotonic() + 120
    while len(producer) > 0 and time.monotonic() < deadline:
        producer.poll(0.1)
        sys.stdout.write("".join(out))
        sys.stdout.flush()
        out.clear()
    remaining = len(producer)
    sys.stdout.write("".join(out))
    sys.stdout.write(f"DONE {counts['acked']} {counts['errors'] + remaining}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
