"""Following a node's log growing at 10,000 lines a second (a benchmark, not a test), side by side in one run with
`tail -F FILE | grep -c "Channel error"` on the same file.

A writer process appends lines from a real node's log (tests/data/broker-log-4.0.5/plain.log: start-up, connections,
channel errors, consumer timeouts), with every other line a channel error's in bursts, at --rate lines a second
for --seconds, and renames the file halfway (a rotation). Beside it, in processes of their own:
  - ackscope: the exporter's --broker-log path: the log followed and read into events, attributed, kept for the
    window and counted (BreakLedger over BrokerLogWatch), once a second, as an exporter polling every second does;
  - baseline: tail -F | grep -c.
Each one's CPU (user + system, of all its processes) as a share of one core, and its RSS once a second.
Target: ackscope under 10 % of one core, its RSS flat (the last second's within 5 MiB of the tenth's).

    python bench/broker_log.py [--rate 10000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ackscope.model.events import CHANNEL_ERROR
from ackscope.sources import BreakLedger, BrokerLogWatch
from ackscope.sources.break_ledger import NAMING_SECONDS

RECORDED = Path(__file__).resolve().parent.parent / "tests" / "data" / "broker-log-4.0.5" / "plain.log"
ERROR = ("{} [error] <0.{}.0> Channel error on connection <0.742.0> (127.0.0.1:47800 -> 127.0.0.1:5672, vhost: '/', "
         "user: 'guest'), channel 1:\n{} [error] <0.{}.0> operation basic.ack caused a channel exception "
         "precondition_failed: unknown delivery tag 1")


def write(path: str, rate: int, seconds: float, ready, result) -> None:
    recorded = RECORDED.read_text().splitlines()
    written, record, started = 0, 0, time.monotonic()
    rotated = False
    out = open(path, "a")  # noqa: SIM115
    ready.set()
    while (elapsed := time.monotonic() - started) < seconds:
        chunk: list[str] = []
        while len(chunk) < int(elapsed * rate) - written:
            if record % 2:
                chunk.append(recorded[record % len(recorded)])
            else:  # a channel error: two lines of one record, under the same header
                stamp = time.strftime("%Y-%m-%d %H:%M:%S") + f".{record % 1_000_000:06d}+00:00"
                chunk += ERROR.format(stamp, record, stamp, record).split("\n")
            record += 1
        written += len(chunk)
        out.write("\n".join(chunk) + "\n" if chunk else "")
        out.flush()
        if not rotated and elapsed > seconds / 2:
            out.close()
            os.rename(path, path + ".1")
            out, rotated = open(path, "a"), True  # noqa: SIM115
        time.sleep(0.01)
    out.close()
    result.put(("written", written))


def follow(path: str, stop, result) -> None:
    ledger = BreakLedger(window_seconds=300, log=BrokerLogWatch(path, from_start=True))
    while True:
        stopping = stop.is_set()  # then this is the last round: the writer has ended
        breaks = ledger.update(None, time.time())
        if stopping:  # what named no connection waits for a name: read as if that time had passed, to count it
            breaks = ledger.update(None, time.time() + NAMING_SECONDS)
            break
        time.sleep(1.0)
    errors = sum(n for key, n in breaks.totals.items() if key[0] == CHANNEL_ERROR)
    result.put(("read", (breaks.lines, errors)))


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "rabbit@node.log")
        Path(path).touch()
        ready, stop, result = ctx.Event(), ctx.Event(), ctx.Queue()
        writer = ctx.Process(target=write, args=(path, args.rate, args.seconds, ready, result))
        ours = ctx.Process(target=follow, args=(path, stop, result))
        ours.start()
        pipeline = subprocess.Popen(f'tail -n +1 -F {path} 2>/dev/null | grep -c "Channel error"', shell=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)
        time.sleep(1)  # both started and settled before the first line
        writer.start()
        ready.wait()
        ackscope = [psutil.Process(ours.pid)]
        baseline = psutil.Process(pipeline.pid).children(recursive=True)
        cpu0 = _cpu(ackscope), _cpu(baseline)
        rss: dict[str, list[int]] = {"ackscope": [], "tail -F | grep -c": []}
        started = time.monotonic()
        while writer.is_alive():
            rss["ackscope"].append(_rss(ackscope))
            rss["tail -F | grep -c"].append(_rss(baseline))
            time.sleep(1)
        elapsed = time.monotonic() - started
        time.sleep(1)  # both read what was written last
        cpu = _cpu(ackscope) - cpu0[0], _cpu(baseline) - cpu0[1]
        stop.set()
        said = dict(result.get(timeout=60) for _ in range(2))
        (lines, errors), written = said["read"], said["written"]
        ours.join()
        for p in baseline:
            if p.name() == "tail":
                p.terminate()
        counted = pipeline.communicate(timeout=30)[0].strip()
    print(f"\nlog growing at {args.rate} lines/s for {args.seconds:.0f} s, rotated halfway: {written} lines written")
    print(f"{'':20} {'CPU, % of one core':>20} {'RSS at 10 s':>12} {'RSS at end':>11} {'RSS max':>9}  read")
    for name, used in (("ackscope", cpu[0]), ("tail -F | grep -c", cpu[1])):
        series = rss[name]
        at10 = series[min(10, len(series) - 1)]
        read = f"{lines} lines, {errors} channel errors" if name == "ackscope" else f"{counted} channel errors"
        print(f"{name:20} {100 * used / elapsed:>19.1f}% {at10 / 2**20:>10.1f} MiB {series[-1] / 2**20:>7.1f} MiB "
              f"{max(series) / 2**20:>5.1f} MiB  {read}")


if __name__ == "__main__":
    sys.exit(main())
