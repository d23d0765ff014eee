#!/usr/bin/env bash
# hostile.sh: legit load through pgtier while hostile clients attack it, one attack at a time.
#
# Starts a throw-away PostgreSQL and pgtier (md5 logins, $WORKERS workers, transaction mode),
# measures `pgbench -S` through pgtier undisturbed and during each attack (an undisturbed run
# right before each, to compare with) of
# `pgtier-hostile` (tests/src/hostile.rs): slowloris startups, random garbage, 2 GB length
# words, a connect flood, clients that never read their answers, and password guessing
# (with auth_failure_delay = 0 and = $AUTH_DELAY). For each it reports legit tps as a share
# of undisturbed, pgbench's failed transactions (and aborted clients), pgtier's peak RSS and
# open fds (sampled from /proc every 0.2 s) and what the attacker got. It fails (exit 1) when
# an attack leaves legit tps below $MIN_SHARE of undisturbed, any failed transaction, or
# pgtier dead. Output is a Markdown fragment ($OUT, by default docs/reliability-hostile.md)
# for the hostile rows of docs/reliability.md. Only 127.0.0.1 is used; every run is bounded.
#
# Usage: bash bench/hostile.sh            (from the repository root, as root or a user that
#                                          can run initdb)
# Environment (defaults): DURATION=15 (seconds of pgbench per row; the attack runs from 2 s
#   in to 1 s before the end) SCALE=10 CLIENTS=8 WORKERS=2 POOL_SIZE=20 AUTH_DELAY=0.5
#   MIN_SHARE=0.8 ATTACKS="slowloris garbage oversized connect-flood no-read brute-force"
#   PGTIER_BIN=<release build> HOSTILE_BIN=<release build> OUT=docs/reliability-hostile.md
#   DRAFT=0 (1: the fragment says the figures are a draft, taken on a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

DURATION="${DURATION:-15}"
SCALE="${SCALE:-10}"
CLIENTS="${CLIENTS:-8}"
WORKERS="${WORKERS:-2}"
POOL_SIZE="${POOL_SIZE:-20}"
AUTH_DELAY="${AUTH_DELAY:-0.5}"
MIN_SHARE="${MIN_SHARE:-0.8}"
ATTACKS="${ATTACKS:-slowloris garbage oversized connect-flood no-read brute-force}"
OUT="${OUT:-docs/reliability-hostile.md}"
DRAFT="${DRAFT:-0}"

# shellcheck source=bench/lib.sh
source bench/lib.sh

bench_tools
if [ -z "${HOSTILE_BIN:-}" ]; then
  log "building pgtier-hostile (release)"
  cargo build --release -q -p pgtier-tests --bin pgtier-hostile
  HOSTILE_BIN="$CARGO_TARGET_DIR/release/pgtier-hostile"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work="$(mktemp -d /tmp/pgtier-hostile.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pgtier_pid=""; attack_pid=""; sampler_pid=""; logins_pid=""
cleanup() {
  set +e
  [ -n "$attack_pid" ] && kill "$attack_pid" 2>/dev/null
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
  [ -n "$logins_pid" ] && kill "$logins_pid" 2>/dev/null
  [ -n "$pgtier_pid" ] && kill -INT "$pgtier_pid" 2>/dev/null && sleep 0.5 && kill -9 "$pgtier_pid" 2>/dev/null
  [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL and pgtier ---------------------------------------------------------------
pg_port="$(free_port)"; pgtier_port="$(free_port)"
log "initdb + start PostgreSQL on 127.0.0.1:$pg_port"
pg_initdb "$work" "$pg_port" 200
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null
"$bindir/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1
# The no-read attacker is a tenant of its own (its own pool), as a misbehaving application is.
"$bindir/psql" -XAtq -h 127.0.0.1 -p "$pg_port" -U postgres postgres \
  -c "CREATE ROLE mallory LOGIN" >/dev/null

printf '"postgres" "legit-secret"\n"mallory" "mallory-secret"\n' >"$work/userlist.txt"
write_config() {
  cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = $WORKERS
auth_type = "md5"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 20000
auth_failure_delay = $1
log_level = "warn"
admin_users = ["postgres"]

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
CONF
}
write_config "$AUTH_DELAY"
"$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1 &
pgtier_pid=$!
wait_port "$pgtier_port" pgtier "$pgtier_pid"
export PGPASSWORD=legit-secret

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
fd_count() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# sample PID FILE: "rss_kb fds" every 0.2 s until killed
sample() {
  while kill -0 "$1" 2>/dev/null; do
    echo "$(rss_kb "$1") $(fd_count "$1")" >>"$2"
    sleep 0.2
  done
}

# logins FILE: a new legit login (psql, one query) every 0.5 s until killed; "ok" or "failed"
# per try into FILE. A held connection table (slowloris) or a login path that the attack
# slows shows here, where pgbench's connections, made before the attack, would not.
logins() {
  while true; do
    if "$bindir/psql" -XAtq -h 127.0.0.1 -p "$pgtier_port" -U postgres -c "SELECT 1" postgres \
        >/dev/null 2>&1; then echo ok; else echo failed; fi >>"$1"
    sleep 0.5
  done
}

# PostgreSQL sessions ever started on the database (pgtier's server logins, and this query's)
server_sessions() {
  "$bindir/psql" -XAtq -h 127.0.0.1 -p "$pg_port" -U postgres postgres \
    -c "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'"
}

# run_pgbench -> "tps failed aborted" (aborted: clients pgbench gave up on, or 1 when it failed)
run_pgbench() {
  local out tps failed aborted=0
  out="$("$bindir/pgbench" -S -n -c "$CLIENTS" -j 2 -T "$DURATION" \
    -h 127.0.0.1 -p "$pgtier_port" -U postgres postgres 2>&1)" || aborted=1
  tps="$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)"
  failed="$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out" | head -1)"
  if grep -q "aborted" <<<"$out"; then
    aborted="$(grep -c "aborted" <<<"$out")"
    log "pgbench: $(grep "aborted" <<<"$out" | head -3)"
  fi
  echo "${tps:-0} ${failed:-0} $aborted"
}

# peak FILE -> "max_rss_mb max_fds"
peak() {
  awk '{ if ($1 > r) r = $1; if ($2 > f) f = $2 } END { printf "%.0f %d\n", r / 1024, f }' "$1"
}

# row NAME ATTACK: pgbench with the attack running beside it (none: undisturbed). Each
# attack's share is against the undisturbed run just before it, so a machine whose load
# drifts (other work on it) moves both alike.
rows=()
baselines=()
failures=0
undisturbed=""
row() {
  local name="$1" attack="$2" samples="$work/samples-$1" tps failed aborted rss fds report="-"
  : >"$samples"
  sample "$pgtier_pid" "$samples" &
  sampler_pid=$!
  if [ "$attack" != none ]; then
    local user=postgres password=wrong-on-purpose
    [ "$attack" = no-read ] && { user=mallory; password=mallory-secret; }
    [ "$attack" = oversized ] && password=legit-secret
    ( sleep 2; exec "$HOSTILE_BIN" "$attack" --port "$pgtier_port" --seconds $((DURATION - 3)) \
        --user "$user" --password "$password" ) >"$work/attack-$name" 2>&1 &
    attack_pid=$!
  fi
  : >"$work/logins-$name"
  ( sleep 2.5; logins "$work/logins-$name" ) &
  logins_pid=$!
  local ticks_before ticks_after cpu sessions_before sessions_after
  sessions_before="$(server_sessions)"
  ticks_before="$(cpu_ticks "$pgtier_pid")"
  read -r tps failed aborted <<<"$(run_pgbench)"
  ticks_after="$(cpu_ticks "$pgtier_pid")"
  sessions_after="$(server_sessions)"
  kill "$logins_pid" 2>/dev/null; wait "$logins_pid" 2>/dev/null || true
  logins_pid=""
  local logins_ok logins_tried
  logins_ok="$(grep -c '^ok' "$work/logins-$name" || true)"
  logins_tried="$(wc -l <"$work/logins-$name")"
  cpu="$(awk -v b="$ticks_before" -v a="$ticks_after" -v hz="$ticks_per_s" -v d="$DURATION" \
    'BEGIN { printf "%.0f", 100 * (a - b) / hz / d }')"
  if [ -n "$attack_pid" ]; then
    wait "$attack_pid" || true
    attack_pid=""
    report="$(head -1 "$work/attack-$name" | cut -d' ' -f2-)"
  fi
  kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""
  read -r rss fds <<<"$(peak "$samples")"
  local alive=yes share="1.00"
  kill -0 "$pgtier_pid" 2>/dev/null || alive=no
  if [ "$attack" = none ]; then
    undisturbed="$tps"
    baselines+=("$tps")
  else
    share="$(awk -v t="$tps" -v u="$undisturbed" 'BEGIN { printf "%.2f", (u > 0 ? t / u : 0) }')"
  fi
  local verdict=ok
  if [ "$alive" != yes ] || [ "$failed" != 0 ] || [ "$aborted" != 0 ] \
     || [ "$logins_ok" != "$logins_tried" ] \
     || awk -v s="$share" -v m="$MIN_SHARE" 'BEGIN { exit !(s < m) }'; then
    verdict=FAIL; failures=$((failures + 1))
  fi
  log "$name: tps $tps ($share), failed $failed, aborted $aborted, RSS ${rss} MB, fds $fds, pgtier CPU ${cpu}%, new logins $logins_ok/$logins_tried, alive $alive: $verdict"
  local server_logins=$((sessions_after - sessions_before - 1))
  log "$name: $server_logins server logins"
  rows+=("| $name | $(printf '%.0f' "$tps") | $share | $failed | $aborted | $logins_ok/$logins_tried | $server_logins | $rss | $fds | $cpu | $alive | $verdict | $report |")
  [ "$alive" = yes ] || { log "pgtier died: $(tail -5 "$work/pgtier.log")"; exit 1; }
}

# undisturbed, then the attack: NAME ATTACK
paired() {
  log "undisturbed, before $1"
  row "undisturbed" none
  log "$1"
  row "$1" "$2"
}
for attack in $ATTACKS; do
  if [ "$attack" = brute-force ]; then
    write_config 0; kill -HUP "$pgtier_pid"; sleep 1
    paired "brute-force (delay 0)" brute-force
    write_config "$AUTH_DELAY"; kill -HUP "$pgtier_pid"; sleep 1
    paired "brute-force (delay $AUTH_DELAY)" brute-force
    continue
  fi
  paired "$attack" "$attack"
done

{
  echo "<!-- generated by bench/hostile.sh; the lead merges it into docs/reliability.md -->"
  echo "## Hostile load"
  echo
  if [ "$DRAFT" = 1 ]; then
    echo "**Draft:** taken on a shared, loaded machine; the figures are indicative only."
    echo
  fi
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(uname -r), PostgreSQL $("$bindir/postgres" --version | awk '{print $3}'),"
  echo "pgtier $("$PGTIER_BIN" --version | awk '{print $2}') ($WORKERS workers, md5 logins, transaction mode,"
  echo "pool $POOL_SIZE, max_client_conn 20000). Legit load: \`pgbench -S -c $CLIENTS -j 2 -T $DURATION\`"
  echo "through pgtier (scale $SCALE); each attack (\`pgtier-hostile\`, tests/src/hostile.rs) runs"
  echo "from 2 s in to 1 s before the end. Share: legit tps over the undisturbed run just before it
(each attack has its own, so a drift in the machine's other load moves both). RSS and fds:"
  echo "pgtier's peak during the row, from /proc. New legit logins: psql logging in and running one"
  echo "query every 0.5 s during the attack, as the legit user from the same address. Server logins:"
  echo "sessions PostgreSQL started during the row (pgtier opening servers). Bar: share"
  echo ">= $MIN_SHARE, 0 failed transactions, 0 aborted clients, every new login ok, pgtier alive."
  echo
  echo "| load | legit tps | share | failed tx | aborted clients | new legit logins ok | server logins | pgtier peak RSS MB | pgtier peak fds | pgtier CPU % of a core | pgtier alive | verdict | attacker's counts |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  printf '%s\n' "${baselines[@]}" | awk '
    NR == 1 { lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END { printf "The undisturbed runs ranged %.0f to %.0f tps (the lowest %.2f of the highest): a share\n", lo, hi, lo / hi
          print "within that spread of 1.00 is the machine, not the attack." }'
  echo
  echo "The attacks (tests/src/hostile.rs, defaults): slowloris, 3000 connections each sending"
  echo "its startup packet one byte per 0.5 s; garbage, 32 connections of random bytes (500 new"
  echo "per second); oversized, 2 GB length words in a startup packet or a logged-in Query, then"
  echo "64 KiB of the body (200 per second); connect-flood, connect and drop, half after a startup"
  echo "packet (2000 per second); no-read, 8 clients of user \`mallory\` (a tenant with its own"
  echo "pool) sending 16 queries of 800 MB answers each, never reading; brute-force, wrong md5"
  echo "logins for the legit user (1000 per second at most; \`auth_failures\` counts the 28P01s"
  echo "they got: with \`auth_failure_delay\`, one per delay per worker for one address). New"
  echo "connections are paced because on one machine an unpaced attacker spends a core of its"
  echo "own, which measures the machine, not the proxy; \`attacker_cpu_s\` is its own CPU time."
} >"$OUT"
log "wrote $OUT"
[ "$failures" = 0 ] || { log "$failures rows below the bar"; exit 1; }
