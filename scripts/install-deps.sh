#!/usr/bin/env bash
# Installs what tests and the demo need on a fresh Debian machine: PostgreSQL server
# binaries (initdb, pg_ctl, postgres), psql and pgbench. Idempotent; quiet when all is there.
set -euo pipefail
need=0
bindir="$(pg_config --bindir 2>/dev/null || true)"
[ -n "$bindir" ] && [ -x "$bindir/initdb" ] || need=1
command -v psql >/dev/null || need=1
command -v pgbench >/dev/null || need=1
id postgres >/dev/null 2>&1 || need=1
if [ "$need" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "PostgreSQL server binaries are missing: run 'sudo apt-get install postgresql' (Debian/Ubuntu)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql postgresql-contrib >/dev/null
fi
