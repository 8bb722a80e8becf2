"""librdkafka (confluent-kafka) share consumer: the second client of the share-group tests.

Usage: share_consume.py BOOTSTRAP TOPIC GROUP RECORDS [TIMEOUT_S] [--urlsafe-member-id]
                        [key=value consumer config...]
Subscribes a ShareConsumer of GROUP to TOPIC, polls until RECORDS records arrived or
TIMEOUT_S (default 60) seconds passed (implicit acknowledgement), closes, and prints
"MEMBER <member id>", then "R <partition> <offset> <value>" per record, then
"DONE <records> <distinct>".

librdkafka picks its member id itself, in standard base64: about every second id holds a
'+' or '/'. Apache Kafka 4.1.1's ShareFetch parses the member id as URL-safe base64 and
fails such a member with UNKNOWN_SERVER_ERROR on every fetch (the member then reads
nothing; later Kafka versions and librdkafka's changelog treat this as a broker defect).
With --urlsafe-member-id the script exits with code 3 and prints "SKIP <member id>" as soon
as it learns such an id, before it fetches, so a test on Kafka 4.1.1 can start another
member instead.
"""
import logging
import sys
import time

from confluent_kafka import ShareConsumer

SKIP_EXIT = 3


class MemberId(logging.Handler):
    """Learns the member id from librdkafka's `cgrp` debug log (the API does not expose it);
    passes every line on to stderr when the caller asked for debug output itself."""

    def __init__(self, echo):
        super().__init__()
        self.echo = echo
        self.member = None

    def emit(self, record):
        msg = record.getMessage()
        if self.echo:
            print(msg, file=sys.stderr, flush=True)
        if "updating member id" in msg and "->" in msg:
            new = msg.rsplit("->", 1)[1].strip().strip('"')
            if new and new != "(not-set)":
                self.member = new


def main():
    args = sys.argv[1:]
    urlsafe_only = "--urlsafe-member-id" in args
    args = [a for a in args if a != "--urlsafe-member-id"]
    bootstrap, topic, group, want = args[0], args[1], args[2], int(args[3])
    timeout = float(args[4]) if len(args) > 4 else 60.0
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    conf.update(kv.split("=", 1) for kv in args[5:])
    handler = MemberId(echo="debug" in conf)
    conf["debug"] = ",".join(filter(None, ["cgrp", conf.get("debug")]))
    log = logging.getLogger("share_consume")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    conf["logger"] = log
    c = ShareConsumer(conf)
    c.subscribe([topic])
    seen = []
    announced = False
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        msgs = c.poll(0.2 if not announced else 1.0)
        if handler.member and not announced:
            announced = True
            print(f"MEMBER {handler.member}", flush=True)
            if urlsafe_only and ("+" in handler.member or "/" in handler.member):
                print(f"SKIP {handler.member}", flush=True)
                c.close()
                sys.exit(SKIP_EXIT)
        if msgs is None:
            continue
        # poll returns a batch of messages (a `Messages` collection).
        for m in msgs:
            if m.error():
                print(f"ERR {m.error()}", flush=True)
                continue
            seen.append((m.partition(), m.offset()))
            print(f"R {m.partition()} {m.offset()} {m.value().decode(errors='replace')}", flush=True)
    c.close()
    print(f"DONE {len(seen)} {len(set(seen))}", flush=True)


if __name__ == "__main__":
    main()
