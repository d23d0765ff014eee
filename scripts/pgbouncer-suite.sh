#!/usr/bin/env bash
# PgBouncer's own pytest suite against pgtier, as CI can run it.
#
#   bash scripts/pgbouncer-suite.sh [PGTIER_BINARY] [PYTEST_ARGS...]
#
# CI reaches Debian's archive but not GitHub, so the suite comes from Debian 13's source
# package of PgBouncer (1.24.1, pinned by its sha256), not from a checkout. The test files are
# downloaded and run, never copied into this repository. With no PYTEST_ARGS it runs the ids in
# tests/pgbouncer-suite/ci-subset.txt, the tests that pass against pgtier and fit CI's time;
# the whole suite (1.25.2 from a checkout) and its per-file results are in
# docs/compatibility.md. Needs PostgreSQL's binaries on PATH or under /usr/lib/postgresql/*/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

bin=$(readlink -f "${1:-target/debug/pgtier}")
[ $# -gt 0 ] && shift
[ -x "$bin" ] || { echo "no pgtier binary at $bin (cargo build -p pgtier first)" >&2; exit 2; }

version=1.24.1
sha256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
url=http://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_${version}.orig.tar.gz
# Short: the suite puts Unix sockets under its temporary directory (108-byte limit).
base=${PGTIER_PGB_SUITE_DIR:-/tmp/pgb-suite}
src=$base/pgbouncer-$version
venv=$base/venv

mkdir -p "$base"
if [ ! -f "$src/test/utils.py" ]; then
  tarball=$base/pgbouncer_${version}.orig.tar.gz
  [ -f "$tarball" ] || curl -fsS --retry 3 -o "$tarball" "$url"
  echo "$sha256  $tarball" | sha256sum -c --quiet -
  tar -xzf "$tarball" -C "$base"
  # The suite reads the build's TLS flag from config.mak; pgtier always has TLS.
  echo "tls_support = yes" > "$src/config.mak"
fi
# The suite runs as `postgres`, which cannot read an interpreter under /root (pyenv): copy the
# newest pyenv CPython where it can. Debian's 3.11.2 is the fallback; its workers can die on some
# tracebacks (a CPython bug), which a run of passing tests does not hit.
py=$base/python
if [ ! -x "$py/bin/python3" ]; then
  pyroot=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  newest=$(ls -d "$pyroot"/versions/3.1[1-9]* 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$newest" ]; then cp -a "$newest" "$py"; else mkdir -p "$py/bin"; ln -s /usr/bin/python3 "$py/bin/python3"; fi
fi
export LD_LIBRARY_PATH=$py/lib
if [ ! -x "$venv/bin/pytest" ]; then
  "$py/bin/python3" -m venv "$venv"
  # Pinned to what 1.24.1 was released against: pytest 8.4+ refuses the marks its conftest puts
  # on fixtures, and psycopg 3.2 words "no result" as the suite does not expect.
  "$venv/bin/pip" install -q "pytest==8.3.5" "pytest-asyncio==0.24.0" "pytest-timeout==2.3.1" \
    "pytest-xdist==3.6.1" "psycopg==3.1.20" "filelock==3.18.0"
fi

pgbin=$(dirname "$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
if [ $# -eq 0 ]; then
  mapfile -t ids < <(grep -vE '^\s*(#|$)' "$repo/tests/pgbouncer-suite/ci-subset.txt")
  set -- "${ids[@]}"
fi

# The suite runs as `postgres`, which may not reach the caller's build (a checkout in a 0700
# directory, as `mktemp -d` makes): a copy under $base is the binary it runs, renamed into
# place so that a pgtier still running from an earlier run does not block it.
cp "$bin" "$base/pgtier.new" && mv -f "$base/pgtier.new" "$base/pgtier"
bin=$base/pgtier
# 1.24.1 starts ../pgbouncer from its test directory (BOUNCER_EXE came in 1.25).
ln -sfn "$bin" "$src/pgbouncer"
tmp=$base/run
rm -rf "$tmp" "$base/results"; mkdir -p "$base/results"
# As root, the suite runs as `postgres` (initdb refuses root); otherwise as the caller.
as_pg=()
if [ "$(id -u)" = 0 ]; then chown -R postgres: "$base"; as_pg=(runuser -u postgres --); fi
chmod a+rx "$(dirname "$bin")" "$bin" 2>/dev/null || true
rc=0
(cd "$src/test" && "${as_pg[@]}" env -i HOME=/var/lib/postgresql LANG=C.UTF-8 LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
    PATH="$pgbin:$venv/bin:/usr/local/bin:/usr/bin:/bin" BOUNCER_EXE="$bin" \
    timeout -k 30 "${PGTIER_PGB_SUITE_TIMEOUT:-1500}" \
    pytest -n "${PGTIER_PGB_SUITE_JOBS:-2}" --timeout 120 -p no:cacheprovider \
      -o asyncio_default_fixture_loop_scope=function -ra -q \
      --junitxml="$base/results/junit.xml" --basetemp="$tmp" "$@") || rc=$?
# The suite's socat helpers can outlive a failed run.
pkill -u "$(id -un postgres 2>/dev/null || id -un)" -x socat 2>/dev/null || true
[ "$rc" = 0 ] || echo "PgBouncer's suite failed against pgtier; report in $base/results/junit.xml" >&2
exit "$rc"
