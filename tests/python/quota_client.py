"""librdkafka producer or consumer under a client id, reporting how long it took and the
throttle times the broker sent back (librdkafka's throttle_cb), for the client-quota tests.

Usage:
  quota_client.py produce BOOTSTRAP TOPIC CLIENT_ID RECORDS [BATCH_SIZE]
                                                  (records of 1000 bytes, acks=1)
  quota_client.py consume BOOTSTRAP TOPIC CLIENT_ID RECORDS   (from the start, group g-CLIENT_ID)
Prints "SECONDS <s>", "THROTTLES <count> <max ms>", then "DONE <records delivered or read>".
Exits 1 on any delivery error or if fewer records were read than asked within 120 s.
"""
import sys
import time

from confluent_kafka import Consumer, Producer


def main():
    mode, bootstrap, topic, client_id = sys.argv[1:5]
    records = int(sys.argv[5])
    batch_size = int(sys.argv[6]) if len(sys.argv) > 6 else 16384
    throttles = []

    def on_throttle(event):
        if event.throttle_time > 0:
            throttles.append(event.throttle_time * 1000.0)

    start = time.monotonic()
    if mode == "produce":
        done = produce(bootstrap, topic, client_id, records, batch_size, on_throttle)
    else:
        done = consume(bootstrap, topic, client_id, records, on_throttle)
    print(f"SECONDS {time.monotonic() - start:.3f}")
    print(f"THROTTLES {len(throttles)} {max(throttles, default=0):.0f}")
    print(f"DONE {done}")
    if done < records:
        sys.exit(1)


def produce(bootstrap, topic, client_id, records, batch_size, on_throttle):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": "1",
        "linger.ms": 5,
        # Java-sized batches: many requests, so the quota's throttling is felt (two 1 MB
        # requests would be answered at once, the throttle landing after the last).
        "batch.size": batch_size,
        "throttle_cb": on_throttle,
    })
    delivered, errors = [0], []

    def report(err, _msg):
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))

    value = b"q" * 1000
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    if errors:
        print("ERRORS", errors[:5])
        sys.exit(1)
    return delivered[0]


def consume(bootstrap, topic, client_id, records, on_throttle):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "group.id": f"g-{client_id}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        # Small fetches, so reading takes as long as the quota allows (a 1 MB fetch would
        # carry the whole topic in one burst, and throttling applies to the next request).
        "max.partition.fetch.bytes": 65536,
        "fetch.max.bytes": 65536,
        "message.max.bytes": 65536,
        "throttle_cb": on_throttle,
    })
    consumer.subscribe([topic])
    read, deadline = 0, time.monotonic() + 120
    while read < records and time.monotonic() < deadline:
        for m in consumer.consume(500, 1.0):
            if m.error() is None:
                read += 1
    consumer.close()
    return read


if __name__ == "__main__":
    main()
