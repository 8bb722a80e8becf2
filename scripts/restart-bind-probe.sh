#!/usr/bin/env bash
# Does a kmirror node restarted on its port bind while the old process's connections linger?
# Starts `kmirror serve` on a fixed port, holds 20 client connections open, stops the node and
# restarts it at once on the same port, printing the states of the old sockets and whether the
# new node listens. MODE `kill` (SIGKILL: the node's side of each connection is left in
# FIN-WAIT-2) or `term` (a graceful stop, then the clients close: the node's side is left in
# TIME-WAIT, the case SO_REUSEADDR is for). Not run by CI (docs/COMPATIBILITY.md, SO_REUSEADDR).
# Usage: KMIRROR_BIN=target/debug/kmirror scripts/restart-bind-probe.sh [PORT] [kill|term]
set -euo pipefail
bin=${KMIRROR_BIN:-target/debug/kmirror}
port=${1:-19093}
mode=${2:-kill}
case $mode in
  kill) signal=KILL; hold=8 ;;
  term) signal=TERM; hold=3.5 ;;
  *) echo "MODE is kill or term" >&2; exit 2 ;;
esac
dir=$(mktemp -d)
trap 'pkill -f "serve --listen 127.0.0.1:$port" || true; rm -rf "$dir"' EXIT
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/d" >"$dir/log1" 2>&1 &
sleep 2
python3 - "$port" "$hold" <<'PY' &
import socket, struct, sys, time
socks = []
for i in range(20):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    body = struct.pack(">hhi", 18, 0, i) + struct.pack(">h", -1)  # ApiVersions v0
    s.sendall(struct.pack(">i", len(body)) + body)
    s.recv(4096)
    socks.append(s)
time.sleep(float(sys.argv[2]))
PY
sleep 2
pkill -$signal -f "serve --listen 127.0.0.1:$port"
sleep 3
echo "sockets on the port, by state:"
ss -tan | grep "127.0.0.1:$port " | awk '{print $1}' | sort | uniq -c
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/d" >"$dir/log2" 2>&1 &
sleep 4
if grep -q "kmirror listening" "$dir/log2"; then echo "restart: bound and listening"; else echo "restart: FAILED"; cat "$dir/log2"; fi
