"""Walks one dynamic broker config through its levels with librdkafka's AdminClient.

Usage: broker_config.py BOOTSTRAP BROKER_ID KEY VALUE1 VALUE2
Steps (IncrementalAlterConfigs, then DescribeConfigs of broker BROKER_ID):
  set-broker       KEY=VALUE1 on broker BROKER_ID
  validate-only    KEY=VALUE2 on the broker, validate_only (nothing changes)
  set-invalid      KEY=not-a-number on the broker (refused)
  delete-broker    KEY deleted on the broker
(confluent-kafka refuses a broker resource with an empty name, so the cluster-wide default
level is franz-go's part of the test; VALUE2 is what validate-only tries.)
Prints one JSON line per step: {"step", "error" (Kafka error name or null), "value",
"source" (ConfigSource name)} as seen after the change has propagated.
"""
import json
import sys
import time

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
    bootstrap, broker, key, v1, v2 = sys.argv[1:6]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def describe():
        res = ConfigResource(ResourceType.BROKER, broker)
        entries = admin.describe_configs([res])[res].result(timeout=30)
        e = entries.get(key)
        if e is None:
            return None, None
        return e.value, ConfigSource(e.source).name

    def alter(name, op, value, validate_only=False):
        entry = ConfigEntry(key, value, incremental_operation=op)
        res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[entry])
        try:
            admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(
                timeout=30
            )
            return None
        except KafkaException as e:
            return e.args[0].name()

    def step(name, target, op, value, validate_only=False, expect_change=True):
        before = describe()
        err = alter(target, op, value, validate_only)
        # Kafka applies a dynamic config through its metadata log: wait for it to show.
        deadline = time.time() + (15 if expect_change and err is None else 2)
        seen = describe()
        while seen == before and time.time() < deadline:
            time.sleep(0.2)
            seen = describe()
        # Kafka can report a change in two halves (the new source with the old value for a
        # moment): read until two answers agree.
        settle = time.time() + 5
        while time.time() < settle:
            time.sleep(0.5)
            again = describe()
            if again == seen:
                break
            seen = again
        print(
            json.dumps({"step": name, "error": err, "value": seen[0], "source": seen[1]}),
            flush=True,
        )

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    step("set-broker", broker, SET, v1)
    step("validate-only", broker, SET, v2, validate_only=True, expect_change=False)
    step("set-invalid", broker, SET, "not-a-number", expect_change=False)
    step("delete-broker", broker, DELETE, None)


if __name__ == "__main__":
    main()
