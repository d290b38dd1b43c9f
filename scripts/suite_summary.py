"""The suite's closing lines, from the JUnit reports of scripts/test.sh's phases: the longest groups of the parallel
phase (one worker runs a group start to end, so the longest sets a floor under the phase), the wall time against
the budget (docs/testing.md), then one 'N passed, N failed' line for both phases together."""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

# A clean clone's whole run, setup included, must fit here so that CI (90 minutes) fits twice in a session.
BUDGET_S = 35 * 60


def counts(report: Path) -> dict[str, int]:
    """tests, failures, errors and skipped of one JUnit report; nothing for a phase that wrote none."""
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    if not report.exists():
        return totals
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
    return totals


def group_minutes(report: Path) -> Counter:
    """Minutes of test time per group of a phase (xdist writes a test's group after its id: `...@group`)."""
    minutes: Counter = Counter()
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            name = case.get("name", "")
            if "@" in name:
                minutes[name.rsplit("@", 1)[1]] += float(case.get("time", 0)) / 60
    return minutes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setup-s", type=int, required=True)
    parser.add_argument("--total-s", type=int, required=True)
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args(argv)
    phases = [counts(r) for r in args.reports]
    failed = sum(p["failures"] + p["errors"] for p in phases)
    skipped = sum(p["skipped"] for p in phases)
    passed = sum(p["tests"] for p in phases) - failed - skipped
    longest = group_minutes(args.reports[0]).most_common(5)
    if longest:
        print("longest groups: " + "; ".join(f"{name} {m:.1f} min" for name, m in longest))
    over = "" if args.total_s <= BUDGET_S else f": OVER the {BUDGET_S // 60}-minute budget, see docs/testing.md"
    print(f"suite time: {args.total_s / 60:.1f} min in all, {args.setup_s} s of it setup{over}")
    print(f"suite: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
