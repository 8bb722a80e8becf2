#!/usr/bin/env python3
"""Counts the record batches, records and average batch size of a topic's segment files.

Usage: scripts/count-batches.py TOPIC DATA_DIR [DATA_DIR ...]
Reads every `*.log` segment under DATA_DIR whose path names TOPIC (a Kafka `log.dirs` or a
kmirror `--data-dir`: both store Kafka's record-batch format), so the batch layouts two
brokers were given can be compared.
"""
import glob
import struct
import sys


def scan(path):
    batches = records = size = 0
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at + 61 <= len(data):
        _base, length = struct.unpack(">qi", data[at:at + 12])
        if length <= 0:
            break
        batches += 1
        records += struct.unpack(">i", data[at + 57:at + 61])[0]
        size += length + 12
        at += length + 12
    return batches, records, size


def main():
    topic = sys.argv[1]
    for root in sys.argv[2:]:
        total = [0, 0, 0]
        for path in glob.glob(root + "/**/*.log", recursive=True):
            if topic in path:
                total = [a + b for a, b in zip(total, scan(path))]
        b, r, s = total
        print(f"{root}: {b} batches, {r} records, {r / max(b, 1):.1f} records/batch, "
              f"{s / max(b, 1):.0f} bytes/batch")


if __name__ == "__main__":
    main()
