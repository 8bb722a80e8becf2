"""Group configs (config resource type GROUP) with librdkafka's AdminClient.

Usage: group_config.py BOOTSTRAP GROUP
Sets consumer.session.timeout.ms=50000 and share.isolation.level=read_committed, tries an
invalid consumer.heartbeat.interval.ms=1, deletes share.isolation.level, and after each step
prints one line: the step, the error (Kafka error name and message, or null) and the group's
own keys as DescribeConfigs shows them (source GROUP_CONFIG).
"""
import json
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)


def main():
    bootstrap, group = sys.argv[1:3]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def own():
        res = ConfigResource(ResourceType.GROUP, group)
        entries = admin.describe_configs([res])[res].result(timeout=30)
        return sorted(
            f"{k}={e.value}"
            for k, e in entries.items()
            if ConfigSource(e.source) == ConfigSource.GROUP_CONFIG
        )

    def step(name, ops):
        res = ConfigResource(
            ResourceType.GROUP,
            group,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops
            ],
        )
        try:
            admin.incremental_alter_configs([res])[res].result(timeout=30)
            error = None
        except KafkaException as e:
            err = e.args[0]
            error = f"{err.name()}: {err.str()}"
        print(json.dumps({"step": name, "error": error, "own": own()}), flush=True)

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    step(
        "set",
        [
            ("consumer.session.timeout.ms", "50000", SET),
            ("share.isolation.level", "read_committed", SET),
        ],
    )
    step("set-invalid", [("consumer.heartbeat.interval.ms", "1", SET)])
    step("delete", [("share.isolation.level", None, DELETE)])


if __name__ == "__main__":
    main()
