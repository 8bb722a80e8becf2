#!/bin/bash
# Thread kinds of a running one-node kmirror: starts BIN on PORT with a fresh data dir, creates
# five topics, produces and consumes with a committing group, commits and aborts transactions
# (librdkafka), and lists every thread name seen from start to end (15-byte kernel names).
# With strace installed it also counts the threads started under each name (every
# PR_SET_NAME), which catches short-lived per-operation threads that sampling misses.
# Usage: scripts/thread-kinds.sh BIN PORT
BIN=$1; PORT=$2; D=$(mktemp -d)
if command -v strace >/dev/null; then
  strace -f -qq --seccomp-bpf -e trace=prctl -o $D/names $BIN serve --listen 127.0.0.1:$PORT \
    --data-dir $D/data >/dev/null 2>&1 &
  TRACER=$!
  sleep 0.5
  PID=$(pgrep -P $TRACER | head -1)
else
  $BIN serve --listen 127.0.0.1:$PORT --data-dir $D/data >/dev/null 2>&1 &
  PID=$!
fi
python3 - "$PORT" <<'PY' &
import sys, time
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import Producer, Consumer
time.sleep(2)
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
tp = Producer({"bootstrap.servers": b, "transactional.id": "tk"})
tp.init_transactions(10)
for i in range(4):
    tp.begin_transaction()
    tp.produce("t1", b"y", partition=i % 2)
    if i == 3: tp.abort_transaction(10)
    else: tp.commit_transaction(10)
print("transactions", 4)
PY
PYPID=$!
declare -A seen
while kill -0 $PYPID 2>/dev/null; do
  for t in /proc/$PID/task/*; do n=$(cat $t/comm 2>/dev/null) && seen["$n"]=1; done
  sleep 0.05
done
wait $PYPID
echo "thread names seen: ${#seen[@]}"; for k in "${!seen[@]}"; do echo "  $k"; done | sort
echo "threads now: $(ls /proc/$PID/task | wc -l)"
kill $PID; wait $PID ${TRACER:-} 2>/dev/null
if [ -f $D/names ]; then
  echo "threads started, by name:"
  grep -o 'PR_SET_NAME, "[^"]*"' $D/names | cut -d'"' -f2 | sort | uniq -c
fi
rm -rf $D
