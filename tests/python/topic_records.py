"""librdkafka producer and reader for the topic-config tests.

Usage: topic_records.py produce BOOTSTRAP TOPIC RECORDS [key=value producer config...]
  Writes RECORDS records (key "k<i>", value "v<i>" padded to 100 bytes, headers
  [("h", "<i>"), ("h", "x")]) to partition 0 and prints, per delivery report,
  "D <offset> <timestamp type> <timestamp>" (type 0 none, 1 CreateTime, 2 LogAppendTime:
  librdkafka takes LogAppendTime from the Produce response), then "DONE".
Usage: topic_records.py dump BOOTSTRAP TOPIC [key=value consumer config...]
  Reads partition 0 from the beginning to the high watermark seen at start (assign, no group)
  and prints "R <offset> <key> <value> <headers> <timestamp type> <timestamp>" per record,
  then "DONE <records>". Either prints "ERR <error>" and exits 1 on a failure.
"""
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING


def text(b):
    return "-" if b is None else b.decode("utf-8", "replace").replace(" ", "_")


def config(pairs, base):
    for kv in pairs:
        k, v = kv.split("=", 1)
        base[k] = v
    return base


def produce(bootstrap, topic, n, extra):
    p = Producer(config(extra, {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20}))
    lines, errors = [], []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            t, ts = msg.timestamp()
            lines.append(f"D {msg.offset()} {t} {ts}")

    for i in range(n):
        p.produce(topic, key=f"k{i}", value=f"v{i}".ljust(100, "."), partition=0,
                  headers=[("h", str(i)), ("h", "x")], on_delivery=report)
        p.poll(0)
    p.flush(60)
    if errors or len(lines) != n:
        print(f"ERR {len(lines)} delivered, errors {errors[:3]}")
        sys.exit(1)
    print("\n".join(sorted(lines, key=lambda l: int(l.split()[1]))))
    print("DONE")


def dump(bootstrap, topic, extra):
    c = Consumer(config(extra, {"bootstrap.servers": bootstrap, "group.id": "topic-records",
                                "enable.auto.commit": False}))
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    pos, lines = 0, []
    deadline = time.time() + 120
    while pos < high:
        if time.time() > deadline:
            print(f"ERR timeout at {pos} of {high}")
            sys.exit(1)
        for m in c.consume(num_messages=10000, timeout=1.0):
            if m.error():
                print(f"ERR {m.error()}")
                sys.exit(1)
            if m.offset() < high:
                hs = ",".join(f"{k}={text(v)}" for k, v in (m.headers() or [])) or "-"
                t, ts = m.timestamp()
                lines.append(f"R {m.offset()} {text(m.key())} {text(m.value())} {hs} {t} {ts}")
            pos = m.offset() + 1
    c.close()
    print("\n".join(lines))
    print(f"DONE {len(lines)}")


def main():
    mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "produce":
        produce(bootstrap, topic, int(sys.argv[4]), sys.argv[5:])
    else:
        dump(bootstrap, topic, sys.argv[4:])


if __name__ == "__main__":
    main()
