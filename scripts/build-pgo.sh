#!/usr/bin/env bash
# Builds pgtier with profile-guided optimization: an instrumented release binary runs a
# pgbench mix against a throw-away PostgreSQL, and the release binary is built again with the
# profile it wrote. Prints the binary's path (target/pgo/release/pgtier) on stdout.
#
#   scripts/build-pgo.sh [--duration SECONDS]
#
# Why: pgtier's user-space work per transaction is a flat profile of small steps (framing,
# the response tracker, the pool, the digests), and what it costs on a host shared with
# PostgreSQL is mostly where that code sits and which way its branches go, not how many
# instructions it has. The profile lays out the hot path and inlines along it: 15–19 % fewer
# instructions per transaction than the plain release build, and 0.7–1.4 µs less user time
# per transaction at 8 and 64 clients (docs/benchmarks.md, "Profile-guided optimization").
#
# The training mix, in transaction mode with one worker: pgbench's select-only and TPC-B-like
# scripts in the simple, extended and prepared protocols (the last exercises named statements
# and their rewriting), at 1, 8 and 64 clients, then large results and COPY both ways (a
# profile marks what it never saw as cold, and cold code is built for size). Paths it never
# runs (TLS, the console, session mode) are built as without a profile.
#
# Needs: PostgreSQL's server binaries and pgbench (scripts/install-deps.sh), and
# llvm-profdata from the Rust toolchain's llvm-tools component (installed with rustup when
# missing). The build uses its own target directory, target/pgo, so the ordinary release
# build is not redone.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

duration=5
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration="$2"; shift 2 ;;
    *) echo "usage: $0 [--duration SECONDS]" >&2; exit 2 ;;
  esac
done

# shellcheck source=bench/lib.sh
source bench/lib.sh

profdata="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  log "installing llvm-tools (rustup) for llvm-profdata"
  rustup component add llvm-tools >&2
fi
[ -x "$profdata" ] || { log "no llvm-profdata at $profdata"; exit 1; }
bindir="$(pg_config --bindir)"

target="${CARGO_TARGET_DIR:-$repo/target}"
gen_dir="$target/pgo-gen"
use_dir="$target/pgo"
# A fixed directory: the instrumented build's flags stay the same from run to run, so cargo
# rebuilds it only when the sources change. The profile's own path changes every run (in
# $work), which makes cargo rebuild the final binary with the new profile.
profiles="$gen_dir/profiles"
rm -rf "$profiles"
mkdir -p "$profiles"
work="$(mktemp -d /tmp/pgtier-pgo.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pid=""
cleanup() {
  # Each step may fail (the process already gone): none of them may skip the next.
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
  as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$work" "$profiles"
}
trap cleanup EXIT

log "building the instrumented pgtier ($gen_dir)"
RUSTFLAGS="-Cprofile-generate=$profiles" CARGO_TARGET_DIR="$gen_dir" \
  cargo build --release --locked -q -p pgtier --bin pgtier >&2
# Only the training run's profile: build scripts compiled with the flag write their own.
rm -f "$profiles"/*.profraw

pg_port="$(free_port)"
port="$(free_port)"
pg_initdb "$work" "$pg_port" 200
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null
"$bindir/pgbench" -i -q -s 10 -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1
printf '"postgres" ""\n' >"$work/userlist.txt"
cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $port
workers = 1
auth_type = "trust"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = 20
log_level = "warn"

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
CONF
PGTIER_LOG=warn "$gen_dir/release/pgtier" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1 &
pid=$!
wait_port "$port" pgtier "$pid"
log "training: pgbench through the instrumented pgtier, ${duration} s per run"
for protocol in simple extended prepared; do
  for clients in 1 8 64; do
    "$bindir/pgbench" -S -n -M "$protocol" -c "$clients" -j 2 -T "$duration" \
      -h 127.0.0.1 -p "$port" -U postgres postgres >/dev/null
  done
  "$bindir/pgbench" -n -M "$protocol" -c 8 -j 2 -T "$duration" \
    -h 127.0.0.1 -p "$port" -U postgres postgres >/dev/null
done
# Large results and COPY both ways: a table out as COPY text, back in through COPY FROM
# STDIN, and out again as a 1M-row SELECT (a server's large answers switch to its own buffer).
psql=("$bindir/psql" -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d postgres)
"${psql[@]}" -c "COPY pgbench_accounts TO STDOUT" >"$work/accounts.copy"
"${psql[@]}" -c "CREATE TABLE pgo_copy_in (LIKE pgbench_accounts)"
"${psql[@]}" -c "\copy pgo_copy_in FROM '$work/accounts.copy'"
"${psql[@]}" -c "SELECT * FROM pgo_copy_in" >/dev/null
# The profile is written when the process exits, so it must exit, not be killed.
kill -TERM "$pid"
wait "$pid" || true
pid=""
ls "$profiles"/*.profraw >/dev/null 2>&1 || { log "the training run wrote no profile"; exit 1; }
"$profdata" merge -o "$work/pgtier.profdata" "$profiles"/*.profraw

log "building pgtier with the profile ($use_dir)"
RUSTFLAGS="-Cprofile-use=$work/pgtier.profdata" CARGO_TARGET_DIR="$use_dir" \
  cargo build --release --locked -q -p pgtier --bin pgtier >&2
echo "$use_dir/release/pgtier"
