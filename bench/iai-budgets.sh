#!/usr/bin/env bash
# Instruction budgets: runs the callgrind benchmarks (wire decode, the engine's per-transaction
# path) and checks their counts against bench/budgets.toml plus its margin. CI runs it from
# scripts/test.sh.
#
#   bash bench/iai-budgets.sh                           check (exit 3 when over budget)
#   bash bench/iai-budgets.sh --update --reason '...'   rewrite the budgets a run went past
#                                    (over the margin, or 5 % under); --all rewrites every one
#   bash bench/iai-budgets.sh --demo-regression         show that a regression fails the check
#
# Installs valgrind (as root, Debian) and iai-callgrind-runner (the version Cargo.lock pins
# for iai-callgrind) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=check
reason=
all=
while [ $# -gt 0 ]; do
    case "$1" in
        --update) mode=update ;;
        --all) all=--all ;;
        --reason) reason=${2:?--reason needs a text}; shift ;;
        --reason=*) reason=${1#--reason=} ;;
        --demo-regression) mode=demo ;;
        -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "iai-budgets: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

install_tools() {
    if ! command -v valgrind >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
        else
            echo "iai-budgets: valgrind is missing: 'sudo apt-get install valgrind'" >&2
            exit 2
        fi
    fi
    # The runner must be the library's exact version, or the benchmarks refuse to run.
    local version
    version=$(awk '/^name = "iai-callgrind"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' \
        Cargo.lock)
    if ! cargo install --list | grep -qx "iai-callgrind-runner v$version:"; then
        echo "== installing iai-callgrind-runner $version"
        cargo install iai-callgrind-runner --version "$version" --locked --quiet
    fi
}

# Runs both benchmarks; the JSON summaries go to $1, everything else to $1.log.
run_benches() {
    if ! cargo bench --locked -p pgtier-bench --bench wire_iai --bench engine_iai -- \
        --output-format=json >"$1" 2>"$1.log"; then
        tail -n 40 "$1.log" >&2
        echo "iai-budgets: the benchmarks did not run (log above)" >&2
        exit 2
    fi
}

demo() {
    # A copy of this tree (tracked and new files, as they are now), the regression applied,
    # checked with its own target dir so the real tree's build is never replaced by it.
    local copy target rc=0
    copy=$(mktemp -d)
    trap 'rm -rf "$copy"' EXIT
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' file; do [ -e "$file" ] && printf '%s\0' "$file"; done |
        tar --null -T - -cf - | tar -xf - -C "$copy"
    if ! (cd "$copy" && git apply bench/budget-demo/regression.patch); then
        echo "iai-budgets: bench/budget-demo/regression.patch no longer applies: remake it" >&2
        exit 1
    fi
    target=${CARGO_TARGET_DIR:-$root/target}
    case "$target" in /*) ;; *) target=$root/$target ;; esac
    echo "== checking a copy with bench/budget-demo/regression.patch applied"
    CARGO_TARGET_DIR=$target/budget-demo IAI_CALLGRIND_HOME=$copy/iai \
        bash "$copy/bench/iai-budgets.sh" || rc=$?
    case $rc in
        3) echo "iai-budgets: demo: the regression failed the check, as it should"; exit 0 ;;
        0) echo "iai-budgets: demo: the regression went UNNOTICED (budgets too loose?)" >&2
           exit 1 ;;
        *) echo "iai-budgets: demo: the check broke for another reason (exit $rc)" >&2; exit 1 ;;
    esac
}

install_tools
if [ "$mode" = demo ]; then
    demo
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "== instruction budgets (bench/budgets.toml)"
run_benches "$scratch/summaries.json"
rc=0
/usr/bin/python3 bench/iai_budgets.py "$mode" bench/budgets.toml "$scratch/summaries.json" \
    --reason "$reason" ${all:+"$all"} || rc=$?
exit "$rc"
