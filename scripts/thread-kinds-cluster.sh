#!/bin/bash
# Thread kinds of a running three-node kmirror cluster (needs strace): starts BIN three times
# (ports BASE.. BASE+5) under strace, creates a replicated topic, commits and aborts
# transactions (markers to other leaders), sends DescribeQuorum and a mirror request (list)
# to every node (the non-leaders forward them), then counts the threads each node started
# under each name (15-byte kernel names). Usage: scripts/thread-kinds-cluster.sh BIN BASE
BIN=$1; BASE=$2; D=$(mktemp -d)
Q="1@127.0.0.1:$((BASE+3)),2@127.0.0.1:$((BASE+4)),3@127.0.0.1:$((BASE+5))"
TRACERS=()
for i in 1 2 3; do
  mkdir -p $D/$i
  strace -f -qq --seccomp-bpf -e trace=prctl -o $D/$i/names $BIN serve --node-id $i \
    --listen 127.0.0.1:$((BASE+i-1)) --data-dir $D/$i/data \
    --controller-listen 127.0.0.1:$((BASE+i+2)) --quorum $Q >$D/$i/log 2>&1 &
  TRACERS+=($!)
done
sleep 6
BOOT="127.0.0.1:$BASE,127.0.0.1:$((BASE+1)),127.0.0.1:$((BASE+2))"
python3 - "$BASE" <<'PY'
import sys, socket, struct, time
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import Producer
base = int(sys.argv[1])
boot = ",".join(f"127.0.0.1:{base+i}" for i in range(3))
a = AdminClient({"bootstrap.servers": boot})
for f in a.create_topics([NewTopic("t", 6, 3)]).values(): f.result()
time.sleep(2)
tp = Producer({"bootstrap.servers": boot, "transactional.id": "tk"})
tp.init_transactions(30)
for i in range(4):
    tp.begin_transaction()
    for p in range(6): tp.produce("t", b"y", partition=p)
    if i == 3: tp.abort_transaction(30)
    else: tp.commit_transaction(30)
print("transactions", 4)
def describe_quorum(port):
    # DescribeQuorum v0 (flexible): header v2, one topic __cluster_metadata, partition 0.
    name = b"__cluster_metadata"
    body = struct.pack(">hhi", 55, 0, 1) + struct.pack(">h", 2) + b"tk" + b"\0"
    body += bytes([2, len(name) + 1]) + name + bytes([2]) + struct.pack(">i", 0) + b"\0\0\0"
    s = socket.create_connection(("127.0.0.1", port), 10)
    s.sendall(struct.pack(">i", len(body)) + body)
    n = struct.unpack(">i", s.recv(4))[0]
    got = b""
    while len(got) < n: got += s.recv(n - len(got))
    s.close()
    return n
for i in range(3):
    print("DescribeQuorum at", base + i, "answer bytes", describe_quorum(base + i))
PY
for i in 0 1 2; do
  $BIN mirror --bootstrap 127.0.0.1:$((BASE+i)) list >/dev/null 2>&1 && echo "mirror list at $((BASE+i)) ok"
done
for t in "${TRACERS[@]}"; do kill $(pgrep -P $t) 2>/dev/null; done
wait
for i in 1 2 3; do
  echo "node $i: threads started, by name:"
  grep -o 'PR_SET_NAME, "[^"]*"' $D/$i/names | cut -d'"' -f2 | sort | uniq -c
done
rm -rf $D
