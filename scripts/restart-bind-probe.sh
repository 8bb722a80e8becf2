#!/usr/bin/env bash
# Does a kmirror node restarted on its port bind while the old process's connections linger?
# Starts `kmirror serve` on a fixed port, holds 20 client connections open, SIGKILLs the node
# (its side of each connection is left in FIN-WAIT-2), restarts it at once on the same port
# and prints whether it listens. Not run by CI (docs/COMPATIBILITY.md, SO_REUSEADDR).
# Usage: KMIRROR_BIN=target/debug/kmirror scripts/restart-bind-probe.sh [PORT]
set -euo pipefail
bin=${KMIRROR_BIN:-target/debug/kmirror}
port=${1:-19093}
dir=$(mktemp -d)
trap 'pkill -f "serve --listen 127.0.0.1:$port" || true; rm -rf "$dir"' EXIT
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/d" >"$dir/log1" 2>&1 &
sleep 2
python3 - "$port" <<'PY' &
import socket, struct, sys, time
socks = []
for i in range(20):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    body = struct.pack(">hhi", 18, 0, i) + struct.pack(">h", -1)  # ApiVersions v0
    s.sendall(struct.pack(">i", len(body)) + body)
    s.recv(4096)
    socks.append(s)
time.sleep(8)
PY
sleep 2
pkill -KILL -f "serve --listen 127.0.0.1:$port"
sleep 1
echo "server-side sockets left: $(ss -tan | grep -c "127.0.0.1:$port " || true)"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$dir/d" >"$dir/log2" 2>&1 &
sleep 4
if grep -q "kmirror listening" "$dir/log2"; then echo "restart: bound and listening"; else echo "restart: FAILED"; cat "$dir/log2"; fi
