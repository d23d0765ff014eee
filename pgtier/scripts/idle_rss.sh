#!/usr/bin/env bash
# RSS of pgtier (1 worker, transaction mode) holding N idle, logged-in client connections.
# Usage (as root): cargo build --release -p pgtier --example serve
#                  pgtier/scripts/idle_rss.sh [clients]
set -euo pipefail
N=${1:-10000}
TARGET=${CARGO_TARGET_DIR:-target}
BIN=$(pg_config --bindir)
WORK=$(mktemp -d /tmp/pgtier-rss.XXXX); chown postgres "$WORK"
PGPORT=$((20000 + $$ % 20000)); TIERPORT=$((PGPORT + 1000))
ulimit -n $((N + 1000))
cleanup() {
  [[ -n "${TIER:-}" ]] && kill -INT "$TIER" 2>/dev/null && sleep 0.3 && kill -INT "$TIER" 2>/dev/null || true
  runuser -u postgres -- "$BIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
runuser -u postgres -- "$BIN/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null
runuser -u postgres -- "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w \
  -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1" start >/dev/null
cat > "$WORK/pgtier.toml" <<TOML
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $TIERPORT
workers = 1
auth_type = "trust"
pool_mode = "transaction"
max_client_conn = $((N + 100))
log_level = "warn"
[databases.postgres]
host = "127.0.0.1"
port = $PGPORT
dbname = "postgres"
TOML
"$TARGET/release/examples/serve" "$WORK/pgtier.toml" & TIER=$!
sleep 0.5
echo "pgtier RSS before: $(awk '/VmRSS/ {print $2, $3}' /proc/$TIER/status)"
python3 - "$TIERPORT" "$N" "$TIER" <<'PY'
import socket, struct, sys, resource
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def startup():
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    return struct.pack("!I", len(body) + 4) + body
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(startup())
    buf = b""
    while not buf.endswith(b"Z\0\0\0\x05I"):
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit(f"connection {i} closed: {buf[-80:]!r}")
        buf += chunk
    socks.append(s)
rss = [l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]
print(f"pgtier RSS with {n} idle clients: {int(rss)/1024:.1f} MB ({int(rss)*1024/n:.0f} bytes/client incl. base)")
PY
