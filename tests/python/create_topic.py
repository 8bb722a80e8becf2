"""Creates a topic with librdkafka's AdminClient. Usage: create_topic.py BOOTSTRAP TOPIC PARTITIONS"""
import sys

from confluent_kafka.admin import AdminClient, NewTopic


def main():
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, fut in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).items():
        fut.result(timeout=60)
        print(f"CREATED {name}")


if __name__ == "__main__":
    main()
