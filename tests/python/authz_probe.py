"""What a librdkafka client sees on a topic or group it may or may not use.

Usage: authz_probe.py BOOTSTRAP produce TOPIC [key=value config...]
       authz_probe.py BOOTSTRAP consume TOPIC GROUP [key=value config...]
Prints "OK" (a message was delivered / consumed) or "ERR <error name>" (the first error the
client reported), or "TIMEOUT" after 20 seconds.
"""
import os
import sys
import time

from confluent_kafka import Consumer, Producer


def produce(bootstrap, topic, extra):
    result = []

    def delivered(err, _msg):
        result.append(f"ERR {err.name()}" if err else "OK")

    def on_error(err):
        result.append(f"ERR {err.name()}")

    p = Producer({
        "bootstrap.servers": bootstrap,
        "message.timeout.ms": 15000,
        "error_cb": on_error,
        **extra,
    })
    p.produce(topic, b"value", on_delivery=delivered)
    deadline = time.time() + 20
    while not result and time.time() < deadline:
        p.poll(0.2)
    return result[0] if result else "TIMEOUT"


def consume(bootstrap, topic, group, extra):
    errors = []
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "error_cb": lambda err: errors.append(err.name()),
        **extra,
    })
    c.subscribe([topic])
    deadline = time.time() + 20
    while time.time() < deadline:
        if errors:
            return f"ERR {errors[0]}"
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            return f"ERR {m.error().name()}"
        return "OK"
    return "TIMEOUT"


def main():
    args = [a for a in sys.argv[1:] if "=" not in a]
    extra = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    bootstrap, what = args[0], args[1]
    if what == "produce":
        out = produce(bootstrap, args[2], extra)
    else:
        out = consume(bootstrap, args[2], args[3], extra)
    print(out, flush=True)
    # Don't wait for retries or a group leave on close.
    os._exit(0)


main()
