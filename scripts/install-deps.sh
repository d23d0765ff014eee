#!/usr/bin/env bash
# Installs what tests and the demo need on a fresh Debian machine: PostgreSQL server
# binaries (initdb, pg_ctl, postgres), psql and pgbench; PgBouncer, its Prometheus exporter and
# the Python drivers the admin-console tests use. Idempotent; quiet when all is there.
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
# The admin-console tests run PgBouncer's own tools against pgtier: Debian's
# prometheus-pgbouncer-exporter, PgBouncer itself (its console is compared with pgtier's), and
# both Python drivers (psycopg2 speaks the simple protocol, psycopg 3 the extended one), and
# asyncpg (its COPY after a named statement is a regression test).
extra=()
[ -x /usr/bin/prometheus-pgbouncer-exporter ] || extra+=(prometheus-pgbouncer-exporter)
[ -x /usr/sbin/pgbouncer ] || extra+=(pgbouncer)
/usr/bin/python3 -c 'import psycopg2' 2>/dev/null || extra+=(python3-psycopg2)
/usr/bin/python3 -c 'import psycopg' 2>/dev/null || extra+=(python3-psycopg)
/usr/bin/python3 -c 'import asyncpg' 2>/dev/null || extra+=(python3-asyncpg)
# PgBouncer's own suite (scripts/pgbouncer-suite.sh): fetched with curl, makes its certificates
# with openssl, and proxies some connections through socat.
for tool in curl openssl socat; do command -v "$tool" >/dev/null || extra+=("$tool"); done
# The fault-injection run (bench/faults.sh) drops and loses packets with nft in network
# namespaces (ip, from iproute2), and queues them to its userspace netem with iptables'
# NFQUEUE target (tests/src/faults/netem.rs, tests/tests/netem.rs).
command -v nft >/dev/null || extra+=(nftables)
command -v iptables >/dev/null || extra+=(iptables)
command -v ip >/dev/null || extra+=(iproute2)
# The Debian package (scripts/package.sh, tests/tests/package.rs): dpkg-shlibdeps and strip,
# lintian, man to render its pages, systemd-analyze to verify its units, logrotate to rotate
# the installed log (unshare, nsenter and chroot, to install it into a throw-away root, are
# in every Debian).
command -v dpkg-shlibdeps >/dev/null || extra+=(dpkg-dev)
command -v strip >/dev/null || extra+=(binutils)
command -v lintian >/dev/null || extra+=(lintian)
command -v man >/dev/null || extra+=(man-db)
command -v systemd-analyze >/dev/null || extra+=(systemd)
command -v adduser >/dev/null || extra+=(adduser)
command -v logrotate >/dev/null || extra+=(logrotate)
if [ "${#extra[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${extra[@]}" >/dev/null ||
      echo "install-deps: could not install ${extra[*]}; the tests that need them say so" >&2
  else
    echo "install-deps: missing ${extra[*]}: 'sudo apt-get install ${extra[*]}' (Debian/Ubuntu)" >&2
  fi
fi
