#!/usr/bin/env bash
# soak.sh: the long soak (`pgtier-soak`, tests/src/bin/pgtier_soak.rs) against a release
# pgtier: $MINUTES of mixed load (client churn, cancels, errors, RELOADs, one replica restart)
# through a primary and a streaming replica, sampling pgtier's RSS, fds, pools and servers,
# and failing when any of them grows beyond the noise around its fitted line. Writes the
# soak row's Markdown fragment to $OUT for docs/reliability.md. scripts/test.sh runs the
# same binary for 2 minutes.
#
# Usage: bash bench/soak.sh            (from the repository root, as root or a user that can
#                                        run initdb)
# Environment (defaults): MINUTES=30 OUT=docs/reliability-soak.md PGTIER_BIN=<release build>
#   DRAFT=0 (1: the fragment says its figures are a draft, from a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
MINUTES="${MINUTES:-30}"
DRAFT="${DRAFT:-0}"
OUT="${OUT:-docs/reliability-soak.md}"

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_tools
export PGTIER_BIN
log "building pgtier-soak"
cargo build -q -p pgtier-tests --bin pgtier-soak
log "soak: $MINUTES minutes against $PGTIER_BIN"
status=0
"$CARGO_TARGET_DIR/debug/pgtier-soak" --minutes "$MINUTES" --out "$OUT" || status=$?
if [ "$DRAFT" = 1 ] && [ -f "$OUT" ]; then
  sed -i '1a\
\
**Draft:** taken on a shared, loaded machine; the figures are indicative only.' "$OUT"
fi
log "wrote $OUT"
exit "$status"
