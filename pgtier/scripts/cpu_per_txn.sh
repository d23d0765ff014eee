#!/usr/bin/env bash
# CPU cost per transaction of pgtier (1 worker) and PgBouncer for `pgbench -S`, in one sitting,
# plus the direct tps. Usage (as root, with PostgreSQL 15, pgbench and pgbouncer installed):
#   cargo build --release -p pgtier --example serve
#   pgtier/scripts/cpu_per_txn.sh [seconds] [clients]
set -euo pipefail
SECS=${1:-10}
CLIENTS=${2:-8}
TARGET=${CARGO_TARGET_DIR:-target}
SERVE=$TARGET/release/examples/serve
BIN=$(pg_config --bindir)
WORK=$(mktemp -d /tmp/pgtier-cpu.XXXX)
chown postgres "$WORK"
PGPORT=${PGPORT_BENCH:-$((20000 + $$ % 20000))}; TIERPORT=$((PGPORT + 1000)); BOUNCERPORT=$((PGPORT + 2000))
TCK=$(getconf CLK_TCK)
cleanup() {
  [[ -n "${TIER:-}" ]] && kill -INT "$TIER" 2>/dev/null && sleep 0.3 && kill -INT "$TIER" 2>/dev/null || true
  [[ -n "${BOUNCER_PID:-}" ]] && kill "$BOUNCER_PID" 2>/dev/null || true
  runuser -u postgres -- "$BIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
runuser -u postgres -- "$BIN/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null
runuser -u postgres -- "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w \
  -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
pgbench -h 127.0.0.1 -p $PGPORT -U postgres -i -s 1 -q postgres >/dev/null 2>&1

cat > "$WORK/pgtier.toml" <<TOML
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $TIERPORT
workers = 1
auth_type = "trust"
pool_mode = "transaction"
default_pool_size = 20
max_client_conn = 1000
log_level = "warn"
[databases.postgres]
host = "127.0.0.1"
port = $PGPORT
dbname = "postgres"
TOML
"$SERVE" "$WORK/pgtier.toml" & TIER=$!

echo '"postgres" ""' > "$WORK/userlist.txt"
cat > "$WORK/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PGPORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCERPORT
auth_type = trust
auth_file = $WORK/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 1000
unix_socket_dir =
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
INI
chown -R postgres "$WORK"
runuser -u postgres -- pgbouncer -d "$WORK/pgbouncer.ini"
sleep 1
BOUNCER_PID=$(cat "$WORK/pgbouncer.pid")

ticks() { awk "{print \$14 + \$15}" "/proc/$1/stat"; }
split() { awk "{print \"user\", \$14, \"sys\", \$15}" "/proc/$1/stat"; }
run() { # name port pid mode
  local before after tps txns out
  pgbench -h 127.0.0.1 -p "$2" -U postgres -S -n -c "$CLIENTS" -j 2 -T 2 -M "$4" postgres >/dev/null 2>&1 || true
  before=$(ticks "$3")
  out=$(pgbench -h 127.0.0.1 -p "$2" -U postgres -S -n -c "$CLIENTS" -j 2 -T "$SECS" -M "$4" postgres 2>&1)
  after=$(ticks "$3")
  txns=$(echo "$out" | awk -F': ' '/actually processed/ {split($2,a,"/"); print a[1]}')
  tps=$(echo "$out" | awk '/^tps/ {print $3; exit}')
  awk -v n="$1" -v m="$4" -v t="$tps" -v d=$((after-before)) -v x="$txns" -v k="$TCK" \
    'BEGIN { printf "%-10s %-9s tps %9.0f  cpu %6.2f us/txn\n", n, m, t, d*1e6/k/x }'
}
for mode in simple extended; do
  pgbench -h 127.0.0.1 -p $PGPORT -U postgres -S -n -c "$CLIENTS" -j 2 -T "$SECS" -M $mode postgres 2>&1 \
    | awk -v m=$mode '/^tps/ {printf "direct     %-9s tps %9.0f\n", m, $3; exit}'
  run pgtier $TIERPORT $TIER $mode
  run pgbouncer $BOUNCERPORT "$BOUNCER_PID" $mode
done
