"""Asks a broker for cluster metadata with librdkafka and reports what it advertised.

Usage: metadata_probe.py BOOTSTRAP TIMEOUT_SECONDS [key=value client config...]
Prints "BROKER <id> <host> <port>" per broker, or "ERR <error>" and exits 1 (e.g. a refused
TLS handshake, or plaintext bytes sent to a TLS port).
"""
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def main():
    bootstrap, timeout = sys.argv[1], float(sys.argv[2])
    conf = {"bootstrap.servers": bootstrap, "log_level": 0}
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    try:
        md = AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException as e:
        print(f"ERR {e}")
        sys.exit(1)
    for b in sorted(md.brokers.values(), key=lambda b: b.id):
        print(f"BROKER {b.id} {b.host} {b.port}")


if __name__ == "__main__":
    main()
