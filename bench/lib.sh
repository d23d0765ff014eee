# lib.sh: what the bench scripts share (sourced, never run): logging, running as the
# `postgres` user, free loopback ports, waiting for a listener, CPU ticks from /proc, and the
# tools every run needs. Callers set `repo` (the repository root) first.

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# Servers run as `postgres` when we are root (initdb, pg_ctl and pgbouncer refuse root).
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_port PORT NAME [PID]: until 127.0.0.1:PORT accepts (10 s at most); fails early when
# PID has exited.
wait_port() {
  local port="$1" name="$2" pid="${3:-}"
  for _ in $(seq 1 100); do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then log "$name exited"; return 1; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "$name did not listen on $port"; return 1
}

ticks_per_s="$(getconf CLK_TCK)"
# utime+stime of a /proc stat file (a process's or one thread's), in clock ticks
stat_ticks() { awk '{ print $14 + $15 }' "$1"; }
cpu_ticks() { stat_ticks "/proc/$1/stat"; }
# "utime stime" of a process, in clock ticks: user-space and kernel time apart
cpu_split() { awk '{ print $14, $15 }' "/proc/$1/stat"; }

# bench_tools [pgbouncer]: PostgreSQL's binaries (bindir), PgBouncer when asked for, and a
# release pgtier unless PGTIER_BIN names one (with PGO=1, the profile-guided build of
# scripts/build-pgo.sh, as the Debian package ships it).
bench_tools() {
  bash scripts/install-deps.sh 2>/dev/null || true
  bindir="$(pg_config --bindir)"
  if [ "${1:-}" = pgbouncer ] && ! command -v pgbouncer >/dev/null; then
    log "installing pgbouncer (Debian package)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
  if [ -z "${PGTIER_BIN:-}" ] && [ "${PGO:-0}" = 1 ]; then
    log "building pgtier (release, profile-guided: scripts/build-pgo.sh)"
    PGTIER_BIN="$(bash scripts/build-pgo.sh)"
  elif [ -z "${PGTIER_BIN:-}" ]; then
    log "building pgtier (release)"
    cargo build --release -q -p pgtier --bin pgtier
    PGTIER_BIN="$CARGO_TARGET_DIR/release/pgtier"
  fi
}

# pg_initdb DIR PORT MAX_CONNECTIONS [MORE_CONF]: a throw-away cluster in DIR/data for
# loopback benchmarks (no durability), its socket in DIR; the caller starts it.
pg_initdb() {
  local dir="$1" port="$2" max="$3" more="${4:-}"
  as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = $max
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
$more
CONF
}
