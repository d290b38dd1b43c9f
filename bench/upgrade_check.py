"""`ackscope upgrade-check` on a large broker (a benchmark, not a test): a private node with --queues durable queues
(every tenth holding 20 persistent messages) and --connections named connections, each consuming on one channel
(prefetch 10), then `ackscope upgrade-check --to newest --format json` run --runs times, its wall time each, beside
`ackscope diagnose --window 1ms` (the same connection options: two source reads 1 ms apart and the rules) as
the baseline. Then what predicting costs the exporter at each poll: diagnosis.upgrade.outlooks (every release later
than the broker's) on one snapshot of that broker, beside the rules every poll runs already (the baseline).
Target: upgrade-check under 10 s at 5,000 queues and 500 connections.

    python bench/upgrade_check.py [--queues 5000] [--connections 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from exporter_scale import grow_queues, hold_channels

from ackscope.core.secret import Secret
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.upgrade import outlooks
from ackscope.sources import Selection, make_source
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))


def timed(argv: list[str]) -> tuple[float, str]:
    """The command's wall time and its output; it must end with a verdict (exit 0, 1 or 2)."""
    started = time.monotonic()
    done = subprocess.run(argv, env={"ACKSCOPE_PASSWORD": ADMIN_PASSWORD, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 1, 2) or not done.stdout:
        raise SystemExit(f"{' '.join(argv[:3])} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return time.monotonic() - started, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    broker = LocalBroker(name="ackscope-bench-upgrade")
    broker.start()
    held = []
    try:
        grow_queues(broker, args.queues)
        held = hold_channels(broker, args.connections, 1, args.queues)
        connection = ["--management-url", broker.management_url, "--username", ADMIN_USER]
        upgrade = [ACKSCOPE, "upgrade-check", "--to", "newest", "--format", "json", *connection]
        diagnose = [ACKSCOPE, "diagnose", "--window", "1ms", "--format", "json", *connection]
        rows = {"upgrade-check --to newest": [], "diagnose --window 1ms (baseline)": []}
        findings = 0
        for _ in range(args.runs):  # interleaved: each meets the broker in the same state
            seconds, out = timed(upgrade)
            findings = len(json.loads(out)["findings"])
            rows["upgrade-check --to newest"].append(seconds)
            seconds, _ = timed(diagnose)
            rows["diagnose --window 1ms (baseline)"].append(seconds)
        per_poll = per_poll_costs(broker)
    finally:
        for conn in held:
            conn.close()
        broker.stop()
        broker.remove()
    print(f"RabbitMQ {broker.release.version}, {args.queues} queues, {args.connections} connections consuming; "
          f"{args.runs} runs each, interleaved; upgrade-check found {findings} items\n")
    print("| command | median s | max s | target |\n|---|---:|---:|---|")
    for name, times in rows.items():
        target = "< 10 s" if name.startswith("upgrade") else "—"
        print(f"| `ackscope {name}` | {statistics.median(times):.2f} | {max(times):.2f} | {target} |")
    print("\nPer exporter poll, on one snapshot of it:\n\n| step | median ms | max ms |\n|---|---:|---:|")
    for name, times in per_poll.items():
        print(f"| {name} | {statistics.median(times) * 1000:.0f} | {max(times) * 1000:.0f} |")
    return 0


def per_poll_costs(broker: LocalBroker, runs: int = 20) -> dict[str, list[float]]:
    source = make_source("management", broker.management_url, None, ADMIN_USER, Secret(ADMIN_PASSWORD), timeout=30.0,
                         deadline=90.0, verify=True, selection=Selection(), upgrade_facts=True)
    try:
        snapshot = source.read()
    finally:
        source.close()
    costs: dict[str, list[float]] = {"the upgrade's predictions (outlooks)": [], "the rules (baseline)": []}
    for _ in range(runs):
        started = time.perf_counter()
        outlooks(snapshot)
        costs["the upgrade's predictions (outlooks)"].append(time.perf_counter() - started)
        started = time.perf_counter()
        diagnose(Context(snapshot))
        costs["the rules (baseline)"].append(time.perf_counter() - started)
    return costs


if __name__ == "__main__":
    sys.exit(main())
