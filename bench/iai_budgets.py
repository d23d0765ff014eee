"""Compares iai-callgrind instruction counts with the budgets in bench/budgets.toml.

Reads the JSON lines that `cargo bench ... -- --output-format=json` prints (one summary per
benchmark), works out each budgeted figure (a benchmark's count, or a derived per-unit figure
such as (transactions_100 - transactions_1) / 99), and either checks the figures against their
budgets plus the file's margin, or rewrites the budgets to the measured figures (--update).
Called by bench/iai-budgets.sh, which runs the benchmarks; the shell script is the interface.

Exit codes: 0 all within budget (or updated), 2 a usage or input error (a budgeted benchmark
that did not run, a raise without a reason), 3 at least one figure over its budget.
"""

import argparse
import datetime
import json
import math
import re
import sys
import tomllib

OVER_BUDGET = 3
BAD_INPUT = 2
# A figure this far under its budget gets a hint to tighten it (a later regression could
# otherwise hide in the slack).
SLACK_HINT_PCT = 5.0


def measured_counts(path):
    """Instruction count (callgrind Ir) per benchmark, keyed "bench_file/function.id"."""
    counts = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            summary = json.loads(line)
            bench_file = summary["module_path"].split("::")[0]
            key = f"{bench_file}/{summary['function_name']}.{summary['id']}"
            for profile in summary["profiles"]:
                if profile.get("tool") != "Callgrind":
                    continue
                metrics = profile["summaries"]["total"]["summary"]["Callgrind"]["Ir"]["metrics"]
                # "Left" holds this run only; "Both" is [this run, the previous run].
                value = next(iter(metrics.values()))
                if isinstance(value, list):
                    value = value[0]
                counts[key] = int(value["Int"])
    return counts


def figure(name, entry, counts):
    """The measured value of one budget entry, or None when a benchmark it needs is missing."""
    if "from" in entry:
        high, low = counts.get(entry["from"]), counts.get(entry["minus"])
        if high is None or low is None:
            return None
        return (high - low) / entry["per"]
    return counts.get(name)


def budget_rows(budgets, counts):
    missing, rows = [], []
    for name, entry in budgets["budget"].items():
        value = figure(name, entry, counts)
        if value is None:
            missing.append(name)
            continue
        rows.append((name, entry, value))
    return rows, missing


def inputs_of(budgets):
    used = set()
    for name, entry in budgets["budget"].items():
        used.update([entry["from"], entry["minus"]] if "from" in entry else [name])
    return used


def fmt(value):
    return f"{value:.1f}" if value != int(value) else str(int(value))


def check(budgets, counts, budget_file):
    default_margin = float(budgets["margin_pct"])
    rows, missing = budget_rows(budgets, counts)
    if missing:
        for name in missing:
            print(f"budgets: {name} is in {budget_file} but its benchmark did not run "
                  "(renamed or removed?): update the entry", file=sys.stderr)
        return BAD_INPUT
    width = max(len(name) for name, _, _ in rows)
    print(f"{'figure':<{width}}  {'budget':>9}  {'limit':>9}  {'measured':>10}  {'ratio':>6}")
    over, slack = [], []
    for name, entry, value in rows:
        budget = entry["instructions"]
        margin = float(entry.get("margin_pct", default_margin))
        limit = budget * (1 + margin / 100)
        ratio = value / budget
        verdict = ""
        if value > limit:
            verdict = "  OVER"
            over.append((name, budget, margin, value, ratio))
        elif value < budget * (1 - SLACK_HINT_PCT / 100):
            verdict = "  (well under)"
            slack.append(name)
        print(f"{name:<{width}}  {budget:>9}  {limit:>9.0f}  {fmt(value):>10}  "
              f"{ratio:>6.3f}{verdict}")
    for key in sorted(set(counts) - inputs_of(budgets)):
        print(f"budgets: note: {key} ({counts[key]}) has no budget in {budget_file}")
    if slack:
        print(f"budgets: note: {', '.join(slack)} cost {SLACK_HINT_PCT:.0f} % or more under "
              "budget; tighten with `bash bench/iai-budgets.sh --update --reason '...'`")
    if over:
        print("", file=sys.stderr)
        for name, budget, margin, value, ratio in over:
            print(f"budgets: FAIL {name}: {fmt(value)} instructions, budget {budget} "
                  f"+{margin:g} % ({(ratio - 1) * 100:+.1f} %)", file=sys.stderr)
        print(f"budgets: this change costs more instructions than {budget_file} allows. If the "
              "cost is intended, raise the budget in the same commit and say why:\n"
              "    bash bench/iai-budgets.sh --update --reason 'what the instructions buy'\n"
              "otherwise find the regression (the callgrind profiles are under "
              "<target dir>/iai/).", file=sys.stderr)
        return OVER_BUDGET
    print(f"budgets: all {len(rows)} figures within budget")
    return 0


def toml_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def update(budgets, counts, budget_file, reason, every):
    """Rewrites `instructions` and `reason` lines in place, keeping everything else.

    Only figures over their limit or well under their budget change (unless `every`): a
    figure inside the margin keeps its budget, so the small move between checkouts does not
    churn the file.
    """
    rows, missing = budget_rows(budgets, counts)
    if missing:
        print(f"budgets: cannot update, these did not run: {', '.join(missing)}", file=sys.stderr)
        return BAD_INPUT
    default_margin = float(budgets["margin_pct"])
    today = datetime.date.today().isoformat()
    changes = {}
    for name, entry, value in rows:
        new = math.ceil(value)
        old = entry["instructions"]
        margin = float(entry.get("margin_pct", default_margin))
        inside = old * (1 - SLACK_HINT_PCT / 100) <= value <= old * (1 + margin / 100)
        if new == old or (inside and not every):
            continue
        if new > old and not reason:
            print(f"budgets: {name} would rise from {old} to {new}: say why with "
                  "--reason '...'", file=sys.stderr)
            return BAD_INPUT
        why = reason or "tightened to the measured count"
        direction = "raised" if new > old else "lowered"
        changes[name] = (new, f"{today}: {why} ({direction} from {old})")
    if not changes:
        print("budgets: nothing to change (every figure is within its margin; --all rewrites "
              "them anyway)")
        return 0
    header = re.compile(r'^\s*\[budget\."(?P<name>[^"]+)"\]\s*$')
    current = None
    out = []
    with open(budget_file, encoding="utf-8") as lines:
        for line in lines:
            match = header.match(line)
            if match:
                current = match.group("name")
            elif current in changes and re.match(r"^\s*instructions\s*=", line):
                line = f"instructions = {changes[current][0]}\n"
            elif current in changes and re.match(r"^\s*reason\s*=", line):
                line = f"reason = {toml_string(changes[current][1])}\n"
            out.append(line)
    with open(budget_file, "w", encoding="utf-8") as target:
        target.writelines(out)
    for name, (new, why) in changes.items():
        print(f"budgets: {name} -> {new}  ({why})")
    print(f"budgets: {budget_file} updated; commit it with the change that needs it")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["check", "update"])
    parser.add_argument("budget_file")
    parser.add_argument("summaries", help="JSON lines from --output-format=json")
    parser.add_argument("--reason", default="")
    parser.add_argument("--all", action="store_true", help="update figures inside the margin too")
    args = parser.parse_args()
    with open(args.budget_file, "rb") as raw:
        budgets = tomllib.load(raw)
    counts = measured_counts(args.summaries)
    if not counts:
        print("budgets: no benchmark summaries in the output", file=sys.stderr)
        return BAD_INPUT
    if args.mode == "check":
        return check(budgets, counts, args.budget_file)
    return update(budgets, counts, args.budget_file, args.reason, args.all)


if __name__ == "__main__":
    sys.exit(main())
