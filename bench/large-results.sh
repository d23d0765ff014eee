#!/usr/bin/env bash
# large-results.sh: large results through pgtier vs PgBouncer vs direct PostgreSQL.
#
# Starts a throw-away PostgreSQL (initdb/pg_ctl as user postgres when run as root), builds
# once a table `big` (an int and a 200-character text column, generate_series) of about
# $SIZE_MB MiB of COPY text, then, directly, through pgtier (1 worker, transaction mode) and
# through PgBouncer (transaction mode), runs two workloads with one psql client:
#   copy    `COPY big TO STDOUT`, the client counting the bytes (psql | wc -c)
#   select  `SELECT id, pad FROM big LIMIT $ROWS` (simple protocol, text rows), psql -At
#           printing the rows into wc -c (a real SELECT: RowDescription + DataRows, not COPY)
# For every path and workload, $REPEAT runs (paths interleaved within each repeat) give:
# wall seconds, MiB/s (wire bytes the client received / wall), the proxy's CPU seconds
# (utime+stime deltas from /proc/<pid>/stat, every thread) and CPU ms per MiB, and the
# client's CPU (psql + wc, from bash's `time`). Medians over the runs are printed, with each
# proxy's MiB/s as a fraction of direct and the ratio pgtier/PgBouncer of CPU per MiB.
# Output is Markdown (stdout and $OUT). Only 127.0.0.1 is used.
#
# Bytes: "client bytes" is what the client printed (wc -c), checked against the table's
# exact size; "wire MiB" is the protocol bytes the client received (CopyData or DataRow
# framing included), computed exactly in SQL from the same rows; MiB/s and ms/MiB use the
# wire bytes. MiB = 2^20 bytes.
#
# Usage: bash bench/large-results.sh            (from the repository root, as root or not)
# Environment (defaults):
#   SIZE_MB=1024        size of the table as COPY text, MiB (rows estimated from the row width)
#   ROWS=1000000        rows of the SELECT workload (capped at the table's rows)
#   REPEAT=3            runs per cell; medians are printed
#   WORKLOADS="copy select"
#   PATHS="direct pgtier pgbouncer"
#   POOL_SIZE=4         pool size of both proxies (one client at a time)
#   PGTIER_BIN=<built with cargo build --release when unset>
#   PGTIER_EXTRA=""     extra lines for pgtier's [pgtier] section, e.g.
#                       'client_buffer_limit_bytes = 8388608'
#   PIN=""              CPU placement with taskset, words ROLE:CPUS with ROLE one of
#                       proxy, client, pg, e.g. PIN="proxy:0 client:1 pg:1". Default: no
#                       pinning by this script. pgtier pins its shard i to the i-th CPU
#                       of its affinity mask itself (pgtier/src/proxy.rs), so unpinned its one
#                       shard runs on CPU 0; with proxy:CPUS the script also re-pins every
#                       pgtier thread after start-up (taskset -a -p).
#   OUT=bench/out/large-results-<time>.md
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

SIZE_MB="${SIZE_MB:-1024}"
ROWS="${ROWS:-1000000}"
REPEAT="${REPEAT:-3}"
WORKLOADS="${WORKLOADS:-copy select}"
PATHS="${PATHS:-direct pgtier pgbouncer}"
POOL_SIZE="${POOL_SIZE:-4}"
PGTIER_EXTRA="${PGTIER_EXTRA:-}"
PIN="${PIN:-}"
mkdir -p bench/out
OUT="${OUT:-bench/out/large-results-$(date -u +%Y%m%dT%H%M%SZ).md}"

# shellcheck source=bench/lib.sh
source bench/lib.sh

# ---- placement -----------------------------------------------------------------------------
pin_proxy=""; pin_client=""; pin_pg=""
for word in $PIN; do
  case "$word" in
    proxy:*) pin_proxy="${word#proxy:}" ;;
    client:*) pin_client="${word#client:}" ;;
    pg:*) pin_pg="${word#pg:}" ;;
    *) log "PIN: unknown word '$word' (want proxy:CPUS, client:CPUS, pg:CPUS)"; exit 2 ;;
  esac
done
# on CPUS CMD... -> CMD under taskset when CPUS is set (taskset execs CMD: same pid)
on() { local cpus="$1"; shift; if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi; }

# ---- tools -------------------------------------------------------------------------------
bench_tools pgbouncer


work="$(mktemp -d /tmp/pgtier-large.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pgtier_pid=""; bouncer_pid=""
cleanup() {
  set +e
  [ -n "$pgtier_pid" ] && kill -INT "$pgtier_pid" 2>/dev/null && sleep 0.5 && kill -9 "$pgtier_pid" 2>/dev/null
  [ -n "$bouncer_pid" ] && kill -9 "$bouncer_pid" 2>/dev/null
  [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL --------------------------------------------------------------------------
pg_port="$(free_port)"; pgtier_port="$(free_port)"; bouncer_port="$(free_port)"
log "initdb + start PostgreSQL on 127.0.0.1:$pg_port${pin_pg:+ (CPUs $pin_pg)}"
# A scan of a large table would otherwise start where a previous one is, and LIMIT would
# return other rows (of other sizes) from run to run.
pg_initdb "$work" "$pg_port" 50 "synchronize_seqscans = off"
# The postmaster's affinity is inherited by every backend it forks.
as_pg ${pin_pg:+taskset -c "$pin_pg"} "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null
pg_sql() { "$bindir/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "$1"; }

# COPY text row: digits of id, a tab, 200 characters, a newline.
rows_est=$(( SIZE_MB * 1048576 / 209 ))
width=$(( 202 + ${#rows_est} ))
table_rows=$(( SIZE_MB * 1048576 / width ))
log "building table big: $table_rows rows (~$width bytes per COPY row, ~$SIZE_MB MiB)"
pg_sql "CREATE UNLOGGED TABLE big (id int NOT NULL, pad text NOT NULL);
        INSERT INTO big SELECT g, rpad(md5(g::text), 200, md5((g + 1)::text))
          FROM generate_series(1, $table_rows) AS g;"
pg_sql "VACUUM (FREEZE, ANALYZE) big" >/dev/null
[ "$ROWS" -gt "$table_rows" ] && { log "ROWS=$ROWS is more than the table's $table_rows rows; using $table_rows"; ROWS=$table_rows; }
select_sql="SELECT id, pad FROM big LIMIT $ROWS"
copy_sql="COPY big TO STDOUT"
# Exact sizes: what the client prints, and the protocol bytes it receives (CopyData is
# type+length+row; DataRow is type+length+column count+two lengths+values).
read -r copy_bytes copy_wire <<<"$(pg_sql "SELECT sum(length(id::text) + octet_length(pad) + 2),
  sum(length(id::text) + octet_length(pad) + 7) FROM big" | tr '|' ' ')"
read -r select_bytes select_wire <<<"$(pg_sql "SELECT sum(length(id::text) + octet_length(pad) + 2),
  sum(length(id::text) + octet_length(pad) + 15) FROM ($select_sql) AS s" | tr '|' ' ')"
log "table: $(pg_sql "SELECT pg_size_pretty(pg_table_size('big'))") on disk; COPY text $copy_bytes bytes, SELECT of $ROWS rows $select_bytes bytes"

# ---- proxies -----------------------------------------------------------------------------
printf '"postgres" ""\n' >"$work/userlist.txt"
cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = 1
auth_type = "trust"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 100
log_level = "warn"
$PGTIER_EXTRA

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
CONF
cat >"$work/pgbouncer.ini" <<CONF
[databases]
postgres = host=127.0.0.1 port=$pg_port dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = 100
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
log_connections = 0
log_disconnections = 0
CONF
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"/pgbouncer.ini "$work"/userlist.txt

# affinity PID -> "tid-name:cpus ..." of every thread
affinity() {
  local task
  for task in /proc/"$1"/task/*; do
    printf '%s:%s ' "$(cat "$task/comm")" "$(awk '/^Cpus_allowed_list/ { print $2 }' "$task/status")"
  done
}

if [[ " $PATHS " == *" pgtier "* ]]; then
  log "starting pgtier ($PGTIER_BIN) on $pgtier_port"
  (export PGTIER_LOG=warn; on "$pin_proxy" "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1) &
  pgtier_pid=$!
  if wait_port "$pgtier_port" pgtier "$pgtier_pid" \
     && "$bindir/psql" -X -q -At -h 127.0.0.1 -p "$pgtier_port" -U postgres -d postgres -c 'SELECT 1' >/dev/null; then
    # The shard pinned itself (pin_to_core) once it started, which the query above proves;
    # only now does a re-pin of every thread stick.
    [ -n "$pin_proxy" ] && taskset -a -p -c "$pin_proxy" "$pgtier_pid" >/dev/null
    log "pgtier threads: $(affinity "$pgtier_pid")"
  else
    log "pgtier did not start; its rows stay empty. Its log:"; cat "$work/pgtier.log" >&2
    kill -9 "$pgtier_pid" 2>/dev/null || true; pgtier_pid=""
  fi
fi
if [[ " $PATHS " == *" pgbouncer "* ]]; then
  log "starting PgBouncer on $bouncer_port"
  # setpriv, not runuser: runuser goes through PAM (pam_limits would cut the open-file limit).
  if [ "$(id -u)" = 0 ]; then
    (on "$pin_proxy" setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer -d "$work/pgbouncer.ini" >/dev/null 2>&1)
  else
    (on "$pin_proxy" pgbouncer -d "$work/pgbouncer.ini" >/dev/null 2>&1)
  fi
  wait_port "$bouncer_port" pgbouncer || { cat "$work/pgbouncer.log" >&2; exit 1; }
  bouncer_pid="$(cat "$work/pgbouncer.pid")"
  log "PgBouncer threads: $(affinity "$bouncer_pid")"
fi

# ---- measurements ------------------------------------------------------------------------

# run_client PORT SQL -> prints "wall_s client_cpu_s bytes" (bytes 0 when the client failed)
run_client() {
  local port="$1" sql="$2" timing
  timing="$( { TIMEFORMAT='%3R %3U %3S'; time (
      (on "$pin_client" "$bindir/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -v ON_ERROR_STOP=1 -c "$sql") 2>"$work/client.err" | wc -c >"$work/client.bytes"
      [ "${PIPESTATUS[0]}" = 0 ] || echo failed >"$work/client.bytes"
    ) ; } 2>&1 )"
  local bytes
  bytes="$(cat "$work/client.bytes")"
  if [ "$bytes" = failed ]; then log "client failed: $(cat "$work/client.err")"; bytes=0; fi
  awk -v t="$timing" -v b="$bytes" 'BEGIN { split(t, f, " "); printf "%s %.3f %s\n", f[1], f[2] + f[3], b }'
}

# measure PATH WORKLOAD -> prints "wall client_cpu bytes proxy_cpu" (proxy_cpu "-" for direct)
measure() {
  local port pid sql before="" after wall ccpu bytes
  case "$1" in
    direct) port="$pg_port"; pid="" ;;
    pgtier) port="$pgtier_port"; pid="$pgtier_pid" ;;
    pgbouncer) port="$bouncer_port"; pid="$bouncer_pid" ;;
  esac
  if [ "$2" = copy ]; then sql="$copy_sql"; else sql="$select_sql"; fi
  [ -n "$pid" ] && before="$(cpu_ticks "$pid")"
  read -r wall ccpu bytes <<<"$(run_client "$port" "$sql")"
  if [ -n "$pid" ]; then
    after="$(cpu_ticks "$pid")"
    echo "$wall $ccpu $bytes $(awk -v d=$((after - before)) -v hz="$ticks_per_s" 'BEGIN { printf "%.2f", d / hz }')"
  else
    echo "$wall $ccpu $bytes -"
  fi
}

# median VALUES... -> the middle value ("-" when there is none)
median() {
  printf '%s\n' "$@" | { grep -v '^-$' || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}

declare -A walls ccpus pcpus got
available() {
  case "$1" in
    direct) return 0 ;;
    pgtier) [ -n "$pgtier_pid" ] ;;
    pgbouncer) [ -n "$bouncer_pid" ] ;;
  esac
}
for workload in $WORKLOADS; do
  log "$workload: warm-up run (direct, not counted)"
  measure direct "$workload" >/dev/null
  for run in $(seq 1 "$REPEAT"); do
    for path in $PATHS; do
      available "$path" || continue
      read -r wall ccpu bytes pcpu <<<"$(measure "$path" "$workload")"
      log "$workload run $run $path: ${wall}s, client ${ccpu}s CPU, $bytes bytes, proxy CPU ${pcpu}s"
      walls[$workload.$path]+="$wall "; ccpus[$workload.$path]+="$ccpu "; pcpus[$workload.$path]+="$pcpu "
      got[$workload.$path]="$bytes"
    done
  done
done

# ---- report -------------------------------------------------------------------------------
{
  echo "# Large results: direct vs pgtier vs PgBouncer"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(uname -r), PostgreSQL $("$bindir/postgres" --version | awk '{print $3}'),"
  echo "$(pgbouncer --version | head -1), pgtier $("$PGTIER_BIN" --version | awk '{print $2}') (1 worker)."
  echo "Table big: $table_rows rows (int + 200-character text). copy = \`$copy_sql\`; select = \`$select_sql\` (psql -At, simple protocol)."
  echo "One psql client, transaction pooling, pool size $POOL_SIZE, median of $REPEAT run(s). Placement: ${PIN:-none; pgtier pins its shard to CPU 0 itself}."
  [ -n "$PGTIER_EXTRA" ] && echo "pgtier settings added: \`$(tr '\n' ';' <<<"$PGTIER_EXTRA")\`."
  echo "MiB/s and ms/MiB use the wire bytes the client received (framing included); client bytes is what psql printed."
  echo
  echo "| workload | path | client bytes | wire MiB | wall s | MiB/s | MiB/s vs direct | proxy CPU s | proxy CPU ms/MiB | client CPU s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT"
declare -A rate cpu_per_mib
for workload in $WORKLOADS; do
  if [ "$workload" = copy ]; then wire="$copy_wire"; expect="$copy_bytes"; else wire="$select_wire"; expect="$select_bytes"; fi
  for path in $PATHS; do
    available "$path" || continue
    # shellcheck disable=SC2086
    wall="$(median ${walls[$workload.$path]})"; ccpu="$(median ${ccpus[$workload.$path]})"
    # shellcheck disable=SC2086
    pcpu="$(median ${pcpus[$workload.$path]})"
    bytes="${got[$workload.$path]}"
    [ "$bytes" != "$expect" ] && { log "$workload $path: the client got $bytes bytes, $expect expected"; bytes="$bytes (expected $expect)"; }
    rate[$workload.$path]="$(awk -v w="$wire" -v t="$wall" 'BEGIN { if (t > 0) printf "%.1f", w / 1048576 / t; else print "-" }')"
    cpu_per_mib[$workload.$path]="$(awk -v w="$wire" -v c="$pcpu" 'BEGIN { if (c == "-") print "-"; else printf "%.2f", c * 1000 / (w / 1048576) }')"
    vs="$(awk -v r="${rate[$workload.$path]}" -v d="${rate[$workload.direct]:-}" 'BEGIN { if (d + 0 > 0 && r + 0 > 0) printf "%.2f", r / d; else print "-" }')"
    awk -v w="$wire" 'BEGIN { printf "%.1f\n", w / 1048576 }' >"$work/mib"
    echo "| $workload | $path | $bytes | $(cat "$work/mib") | $wall | ${rate[$workload.$path]} | $vs | $pcpu | ${cpu_per_mib[$workload.$path]} | $ccpu |" | tee -a "$OUT"
  done
done
{
  echo
  echo "| workload | pgtier/PgBouncer CPU per MiB | pgtier/PgBouncer MiB/s |"
  echo "|---|---:|---:|"
} | tee -a "$OUT"
for workload in $WORKLOADS; do
  awk -v t="${cpu_per_mib[$workload.pgtier]:-}" -v b="${cpu_per_mib[$workload.pgbouncer]:-}" \
      -v rt="${rate[$workload.pgtier]:-}" -v rb="${rate[$workload.pgbouncer]:-}" -v n="$workload" 'BEGIN {
    c = (t + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", t / b) : "-";
    r = (rt + 0 > 0 && rb + 0 > 0) ? sprintf("%.2f", rt / rb) : "-";
    printf "| %s | %s | %s |\n", n, c, r }' | tee -a "$OUT"
done
log "results written to $OUT"
