"""Describes topic configs with librdkafka's AdminClient.

Usage: topic_config.py BOOTSTRAP TOPIC KEY [KEY...]
Prints one JSON line per key: {"key", "value", "source" (ConfigSource name)}.
"""
import json
import sys

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType


def main():
    bootstrap, topic = sys.argv[1:3]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=30)
    for key in sys.argv[3:]:
        e = entries.get(key)
        value, source = (None, None) if e is None else (e.value, ConfigSource(e.source).name)
        print(json.dumps({"key": key, "value": value, "source": source}), flush=True)


if __name__ == "__main__":
    main()
