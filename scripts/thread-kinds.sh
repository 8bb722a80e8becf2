#!/bin/bash
# Thread kinds of a running one-node kmirror: starts BIN on PORT with a fresh data dir, creates
# five topics, produces and consumes with a committing group (librdkafka), and lists every
# thread name seen meanwhile (15-byte kernel names). Usage: scripts/thread-kinds.sh BIN PORT
BIN=$1; PORT=$2; D=$(mktemp -d)
$BIN serve --listen 127.0.0.1:$PORT --data-dir $D >/dev/null 2>&1 &
PID=$!
sleep 2
python3 - "$PORT" <<'PY' &
import sys, time
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import Producer, Consumer
b = "127.0.0.1:" + sys.argv[1]
a = AdminClient({"bootstrap.servers": b})
for i in range(5):
    fs = a.create_topics([NewTopic(f"t{i}", 2, 1)])
    for f in fs.values(): f.result()
p = Producer({"bootstrap.servers": b})
for i in range(100): p.produce("t0", b"x"*10)
p.flush()
c = Consumer({"bootstrap.servers": b, "group.id": "g", "auto.offset.reset": "earliest"})
c.subscribe(["t0"])
n=0
t=time.time()
while n < 100 and time.time()-t < 20:
    m = c.poll(0.5)
    if m and not m.error(): n+=1; c.commit(m, asynchronous=False)
c.close()
print("consumed", n)
PY
PYPID=$!
declare -A seen
for i in $(seq 1 40); do
  for t in /proc/$PID/task/*; do n=$(cat $t/comm 2>/dev/null); seen["$n"]=1; done
  sleep 0.25
done
wait $PYPID
echo "thread names seen: ${#seen[@]}"; for k in "${!seen[@]}"; do echo "  $k"; done | sort
echo "threads now: $(ls /proc/$PID/task | wc -l)"
kill $PID; wait $PID 2>/dev/null; rm -rf $D
