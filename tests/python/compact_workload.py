"""librdkafka (confluent-kafka) keyed workload for a compacted topic (partition 0): many
updates per key, tombstones, a committed and an aborted transaction, written one step at a
time (flushed) so offsets are the same on any broker.

Usage: compact_workload.py BOOTSTRAP TOPIC workload ROLL_MS
       compact_workload.py BOOTSTRAP TOPIC filler N
`workload` sleeps ROLL_MS after each step (so time-based segment rolls happen), then prints
"FINAL <key> <value>" per key still alive after compaction ("-" never: tombstoned keys are
left out) and "DONE". `filler` writes N records of keys f0..f2 with 1000-byte values (to make
dirty data and roll segments) and prints "DONE". Any delivery error: "ERR <error>", exit 1.
"""
import sys
import time

from confluent_kafka import KafkaException, Producer

KEYS = 15


def main():
    bootstrap, topic, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(str(err))

    base = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if mode == "filler":
        p = Producer(dict(base, **{"enable.idempotence": True}))
        for i in range(int(sys.argv[4])):
            p.produce(topic, key=f"f{i % 3}".encode(), value=(f"fill{i}".ljust(1000, ".")).encode(),
                      partition=0, on_delivery=report)
        p.flush(30)
        finish(errors)
        return
    roll = int(sys.argv[4]) / 1000.0
    model = {}
    p = Producer(dict(base, **{"enable.idempotence": True}))
    for r in range(6):
        for n in range(40):
            k = f"k{n % KEYS}"
            v = None if (r * 40 + n) % 9 == 4 else f"r{r}-n{n}"
            p.produce(topic, key=k.encode(), value=None if v is None else v.encode(), partition=0,
                      on_delivery=report)
            model[k] = v
        p.flush(30)
        time.sleep(roll)
    t = Producer(dict(base, **{"transactional.id": f"compact-{topic}", "transaction.timeout.ms": 60000}))
    t.init_transactions(30)
    t.begin_transaction()
    for i in range(5):
        t.produce(topic, key=f"k{i}".encode(), value=f"c-{i}".encode(), partition=0, on_delivery=report)
        model[f"k{i}"] = f"c-{i}"
    t.commit_transaction(30)
    time.sleep(roll)
    t.begin_transaction()
    for i in range(5, 10):
        t.produce(topic, key=f"k{i}".encode(), value=f"x-{i}".encode(), partition=0, on_delivery=report)
    t.flush(30)
    t.abort_transaction(30)
    time.sleep(roll)
    for i in range(10, 13):
        p.produce(topic, key=f"k{i}".encode(), value=None, partition=0, on_delivery=report)
        model[f"k{i}"] = None
    p.produce(topic, key=b"k13", value=b"last-13", partition=0, on_delivery=report)
    model["k13"] = "last-13"
    p.flush(30)
    for k in sorted(model):
        if model[k] is not None:
            print(f"FINAL {k} {model[k]}")
    finish(errors)


def finish(errors):
    if errors:
        print(f"ERR {len(errors)} {errors[0]}", flush=True)
        sys.exit(1)
    print("DONE", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print(f"ERR {e}", flush=True)
        sys.exit(1)
