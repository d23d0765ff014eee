#!/usr/bin/env bash
# faults.sh: pgtier under injected network and server faults, with a ledger of acknowledged
# writes (issue 26). Runs tests/src/bin/pgtier_faults.rs (module tests/src/faults/): pgtier,
# the clients and a primary with two streaming replicas each in their own network namespace
# (`faults-*`, 10.26.10.0/24 on a bridge), faults injected under load (nftables drops and
# loss, a delaying relay, a userspace netem over iptables' NFQUEUE for per-packet delay,
# jitter and reordering, SIGSTOP, SIGKILL, switchover, failover), the ledger checked on the
# primary after each scenario. Traffic stays inside those namespaces. Needs root, and
# installs nftables and iptables when missing.
#
# Usage: bash bench/faults.sh [--short] [--only a,b] [--draft] [--no-doc]
#   default: every scenario (about 8 minutes), release build, and the table is written into
#            docs/reliability.md;
#   --short: the CI subset (ledger self-check and four scenarios, about 90 s), debug
#            build, the table only printed;
#   --draft: the header says the machine was loaded (figures indicative only).
# Environment: PROFILE=release|debug (default: release, debug with --short),
#   PGTIER_FAULTS_KEEP=1 keeps pgtier's logs and configs under /tmp/pgtier-faults-<pid>.
# Exits 1 when an acknowledged write is lost or a write duplicated, or the self-check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
doc=1
args=()
for arg in "$@"; do
  case "$arg" in
    --short) short=1; doc=0; args+=("$arg") ;;
    --no-doc) doc=0 ;;
    *) args+=("$arg") ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "faults.sh: network namespaces need root" >&2
  exit 2
fi
if ! command -v nft >/dev/null; then
  echo "faults.sh: installing nftables (the nft tool; the kernel side is built in)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y nftables >/dev/null
fi
if ! command -v iptables >/dev/null; then
  echo "faults.sh: installing iptables (its NFQUEUE target feeds the harness's netem)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y iptables >/dev/null
fi
command -v ip >/dev/null || { echo "faults.sh: iproute2 (ip) is needed" >&2; exit 2; }

profile="${PROFILE:-}"
if [ -z "$profile" ]; then
  if [ "$short" = 1 ]; then profile=debug; else profile=release; fi
fi
if [ "$profile" = release ]; then
  cargo build --locked --release -p pgtier-tests --bin pgtier-faults --bin pgtier-under-test
else
  cargo build --locked -p pgtier-tests --bin pgtier-faults --bin pgtier-under-test
fi
bin="target/$profile/pgtier-faults"
if [ "$doc" = 1 ]; then
  args+=(--doc docs/reliability.md)
fi
# SIGINT/SIGTERM make the harness tear its lab down; after a SIGKILL, run it with --cleanup.
exec "$bin" "${args[@]}"
