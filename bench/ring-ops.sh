#!/usr/bin/env bash
# ring-ops.sh: counts pgtier's io_uring operations and io_uring_enter calls per pgbench -S
# transaction (kernel tracepoints via `perf stat`), to tell whether CPU per transaction comes
# from pgtier issuing more operations or from the kernel's cost per operation.
# A pooled transaction completes 4 operations (receive from the client, send to the server,
# receive from the server, send to the client); the two receives are multishots that stay
# armed, so 2 are submitted per transaction when the answers are small.
#
# Usage (root, from the repository root): bash bench/ring-ops.sh
# Environment: PGTIER_BIN (default: target/release/pgtier, built if missing), DURATION=5,
#   CLIENTS="8 64", PROTOCOLS="simple extended", SCALE=5. Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-5}"; CLIENTS="${CLIENTS:-8 64}"; PROTOCOLS="${PROTOCOLS:-simple extended}"
SCALE="${SCALE:-5}"
bin="${PGTIER_BIN:-target/release/pgtier}"
[ -x "$bin" ] || cargo build --release -p pgtier --bin pgtier
command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 1; }
bindir="$(pg_config --bindir)"
work="$(mktemp -d /tmp/pgtier-ring-ops.XXXXXX)"; chmod 755 "$work"
pg_port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
px_port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir "$work/data"; [ "$(id -u)" = 0 ] && chown postgres "$work/data"
cleanup() {
  [ -n "${proxy_pid:-}" ] && kill "$proxy_pid" 2>/dev/null || true
  as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
as_pg "$bindir/initdb" -D "$work/data" -A trust -U postgres --no-sync >/dev/null
printf "port=%s\nlisten_addresses='127.0.0.1'\nunix_socket_directories='%s'\nmax_connections=200\nfsync=off\n" \
  "$pg_port" "$work/data" >> "$work/data/postgresql.conf"
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/data/log" -w start >/dev/null
pgbench -h 127.0.0.1 -p "$pg_port" -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
cat > "$work/pgtier.toml" <<TOML
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $px_port
workers = 1
auth_type = "trust"
pool_mode = "transaction"
default_pool_size = 20
max_client_conn = 500
[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
TOML
"$bin" --config "$work/pgtier.toml" > "$work/pgtier.log" 2>&1 &
proxy_pid=$!
sleep 1
echo "| protocol | clients | transactions | ring ops/txn | io_uring_enter/txn | waits/txn |"
echo "|---|---:|---:|---:|---:|---:|"
for protocol in $PROTOCOLS; do
  for clients in $CLIENTS; do
    perf stat -x, -e io_uring:io_uring_submit_req,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_cqring_wait \
      -p "$proxy_pid" -o "$work/stat.csv" -- sleep "$((DURATION + 1))" &
    stat_pid=$!
    txns=$(pgbench -h 127.0.0.1 -p "$px_port" -U postgres -S -M "$protocol" -c "$clients" -j 2 \
      -T "$DURATION" postgres 2>/dev/null | awk -F': ' '/actually processed/ {print $2}' | cut -d/ -f1)
    wait "$stat_pid"
    ops=$(awk -F, '/submit_req/ {print $1}' "$work/stat.csv")
    enters=$(awk -F, '/sys_enter_io_uring_enter/ {print $1}' "$work/stat.csv")
    waits=$(awk -F, '/cqring_wait/ {print $1}' "$work/stat.csv")
    awk -v p="$protocol" -v c="$clients" -v t="$txns" -v o="$ops" -v e="$enters" -v w="$waits" \
      'BEGIN { printf "| %s | %d | %d | %.2f | %.3f | %.3f |\n", p, c, t, o/t, e/t, w/t }'
  done
done
