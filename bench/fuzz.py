"""The fuzz properties of tests/test_fuzz.py at 10,000 cases each (the suite runs 300): any management API
answer through the normaliser, the rules, the exposition and the JSON documents; any text from the Prometheus
plugin; Parquet files cut short or with bytes flipped. Prints each property's cases, time and outcome.

The cases run in rounds of --chunk, each a fresh process with its own seed: hypothesis keeps what it has
generated for the whole of a run (about 0.2 MiB a case here), so one run of 10,000 would take gigabytes.

    python bench/fuzz.py [--examples 10000] [--chunk 1000]
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
    parser.add_argument("--chunk", type=int, default=1_000)
    args = parser.parse_args()
    names = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", str(TESTS / "test_fuzz.py")],
                           capture_output=True, text=True, cwd=TESTS.parent).stdout.split()
    failed = 0
    print("| property | cases | seconds | outcome |\n|---|---:|---:|---|")
    for test in [n for n in names if "::test_" in n]:
        started, outcome, ran = time.monotonic(), "passed", 0
        for seed in range(-(-args.examples // args.chunk)):
            n = min(args.chunk, args.examples - ran)
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   f"--hypothesis-seed={seed}", test],
                                  env={**os.environ, "ACKSCOPE_FUZZ_EXAMPLES": str(n)},
                                  capture_output=True, text=True, cwd=TESTS.parent)
            ran += n
            if done.returncode != 0:
                failed += 1
                outcome = f"FAILED (seed {seed}): " + done.stdout.strip().splitlines()[-1]
                break
        print(f"| {test.split('::')[1]} | {ran} | {time.monotonic() - started:.0f} | {outcome} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
