"""The fuzz properties of tests/test_fuzz.py at 10,000 cases each (the suite runs 300): any management API
answer through the normaliser, the rules, the exposition and the JSON documents; any text from the Prometheus
plugin; Parquet files cut short or with bytes flipped. Prints each property's cases, time and outcome.

    python bench/fuzz.py [--examples 10000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000)
    args = parser.parse_args()
    names = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", str(TESTS / "test_fuzz.py")],
                           capture_output=True, text=True, cwd=TESTS.parent).stdout.split()
    failed = 0
    print("| property | cases | seconds | outcome |\n|---|---:|---:|---|")
    for test in [n for n in names if "::test_" in n]:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                              env={**os.environ, "ACKSCOPE_FUZZ_EXAMPLES": str(args.examples)},
                              capture_output=True, text=True, cwd=TESTS.parent)
        failed += done.returncode != 0
        outcome = "passed" if done.returncode == 0 else "FAILED: " + done.stdout.strip().splitlines()[-1]
        print(f"| {test.split('::')[1]} | {args.examples} | {time.monotonic() - started:.0f} | {outcome} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
