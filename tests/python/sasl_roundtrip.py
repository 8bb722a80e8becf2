"""Produces records over an authenticated connection, then reads the partition back from the
beginning with a second (consumer) connection, both librdkafka with the given security config.

Usage: sasl_roundtrip.py BOOTSTRAP TOPIC RECORDS [key=value client config...]
`oauth.token.file=PATH` (ours): OAUTHBEARER with the token in PATH, handed over by oauth_cb.
Prints "ACK <offset> <value>" per acknowledged record (partition 0), "R <offset> <value>" per
record read, then "DONE <acked> <read>". On an authentication failure prints
"AUTHFAIL <message>" and exits 2; other errors "ERR <error>", exit 1.
"""
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition, OFFSET_BEGINNING


def fail_on_auth(err):
    if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        print(f"AUTHFAIL {err.str()}", flush=True)
        os._exit(2)


def main():
    bootstrap, topic, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conf = {"bootstrap.servers": bootstrap, "error_cb": fail_on_auth}
    for kv in sys.argv[4:]:
        k, v = kv.split("=", 1)
        if k == "oauth.token.file":
            token = open(v).read().strip()
            conf["oauth_cb"] = lambda _cfg, t=token: (t, time.time() + 3600)
        else:
            conf[k] = v
    acked = []

    def on_delivery(err, msg):
        if err is not None:
            fail_on_auth(err)
            print(f"ERR {err}", flush=True)
            os._exit(1)
        acked.append((msg.offset(), msg.value().decode()))

    p = Producer(dict(conf, acks="all", **{"message.timeout.ms": 30000}))
    for i in range(records):
        p.produce(topic, value=f"rec-{i}".encode(), partition=0, on_delivery=on_delivery)
        p.poll(0)
    if p.flush(60) != 0:
        print("ERR flush timed out", flush=True)
        os._exit(1)
    for off, val in acked:
        print(f"ACK {off} {val}")
    c = Consumer(dict(conf, **{"group.id": "sasl-roundtrip", "enable.auto.commit": False}))
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read, pos, deadline = 0, 0, time.time() + 60
    while pos < high:
        if time.time() > deadline:
            print(f"ERR timeout at {pos} of {high}", flush=True)
            os._exit(1)
        for m in c.consume(num_messages=1000, timeout=1.0):
            if m.error():
                fail_on_auth(m.error())
                print(f"ERR {m.error()}", flush=True)
                os._exit(1)
            print(f"R {m.offset()} {m.value().decode()}")
            read += 1
            pos = m.offset() + 1
    c.close()
    print(f"DONE {len(acked)} {read}", flush=True)


if __name__ == "__main__":
    main()
