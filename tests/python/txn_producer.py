"""librdkafka (confluent-kafka) transactional producer for the DR-safety tests.

Usage: txn_producer.py BOOTSTRAP TOPIC PARTITIONS RECORDS [key=value producer config...]
Runs one transaction writing RECORDS records round-robin over PARTITIONS, then commits.
Prints "COMMITTED" when the commit succeeds, or "ERR <stage> <error>" when a stage fails
(the transaction is then aborted if possible: "ABORTED" or "ERR abort <error>").
txnproducer.abort=true (ours, not librdkafka's): abort the transaction after its records
are flushed instead of committing it ("ABORTED"); txnproducer.prefix=P: values "P:<i>"
instead of "txn:<i>".
"""
import sys

from confluent_kafka import KafkaException, Producer


def main():
    bootstrap, topic, partitions, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    conf = {
        "bootstrap.servers": bootstrap,
        "transactional.id": f"py-txn-{topic}",
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
    }
    for kv in sys.argv[5:]:
        k, v = kv.split("=", 1)
        conf[k] = v
    abort = conf.pop("txnproducer.abort", "false") == "true"
    prefix = conf.pop("txnproducer.prefix", "txn")
    p = Producer(conf)
    try:
        p.init_transactions(30)
    except KafkaException as e:
        print(f"ERR init {e}", flush=True)
        return
    p.begin_transaction()
    stage = "produce"
    try:
        for i in range(records):
            p.produce(topic, value=f"{prefix}:{i}".encode(), partition=i % partitions)
        stage = "flush"
        p.flush(20)
        if abort:
            p.abort_transaction(20)
            print("ABORTED", flush=True)
            return
        stage = "commit"
        p.commit_transaction(20)
        print("COMMITTED", flush=True)
        return
    except KafkaException as e:
        print(f"ERR {stage} {e}", flush=True)
    try:
        p.abort_transaction(20)
        print("ABORTED", flush=True)
    except KafkaException as e:
        print(f"ERR abort {e}", flush=True)


if __name__ == "__main__":
    main()
