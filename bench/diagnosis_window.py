"""What the recent window costs the exporter (a benchmark, not a test): the rules over a broker of
5,000 queues, 600 channels and consumers and 200 connections, polled every 15 s (simulated clock, fresh
records each poll, as a real poll makes them), judged against the previous poll only (before issue 15)
and against a 5-minute window kept by diagnosis.window.Recent (after), side by side in one run.

Reports per-poll diagnosis time (p50, p99) and the memory the kept snapshots hold (tracemalloc, after a
full collection); a third row adds the oldest message's age per queue (diagnosis.waiting, issue 41): its
tracker updated each poll and read by the rules; a fourth, the channels and queues that went, remembered for the
window (diagnosis.departures). Targets: diagnosis p99 <= 100 ms at this size; the window's memory <= 100 MiB.

Every tenth queue dead-letters through the default exchange to the queue ten on, with a message TTL and a length
limit (a retry topology's shape), where the model keeps those settings (from issue 55): the same script run
against an older checkout's package (PYTHONPATH) measures the rules before a change, beside them after
(issue 55: p99 within 1.5x, memory within 2x).

    python bench/diagnosis_window.py [--queues 5000] [--connections 200] [--polls 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
import tracemalloc

from ackscope.core.quantile import sample_quantile
from ackscope.diagnosis.departures import Departures
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.diagnosis.waiting import Waiting
from ackscope.diagnosis.window import Recent
from ackscope.model.snapshot import (
    Channel,
    Connection,
    Consumer,
    MessageStats,
    Overview,
    Queue,
    Snapshot,
    attributed,
)

INTERVAL = 15.0
# The queue settings the model keeps (none before issue 55): a setting it does not know is left out.
KNOWN = {f.name for f in dataclasses.fields(Queue)}


def settings(i: int) -> dict:
    """Every tenth queue dead-letters to the queue ten on, with a TTL and a length limit, as the management API
    shows them; the others show none."""
    shown = {"settings_shown": True}
    if i % 10 == 0:
        shown |= {"dead_letter_exchange": "", "dead_letter_routing_key": f"q{i + 10}", "message_ttl_ms": 60_000,
                  "max_length": 10_000}
    return {k: v for k, v in shown.items() if k in KNOWN}


def broker(poll: int, queues: int, connections: int) -> Snapshot:
    """One poll's snapshot: counters grow with the poll number; every record new."""
    n = poll * 100
    conns = [Connection(f"10.0.{c // 250}.{c % 250}:5{c:04d} -> 10.0.0.1:5672", "/", "app", "", 60, "running",
                        "rabbit@a", f"10.0.{c // 250}.{c % 250}", "py-amqp 5.4.2", 50000 + c, None)
             for c in range(connections)]
    channels, consumers = [], []
    for i, conn in enumerate(conns):
        for number in (1, 2, 3):
            name = f"{conn.name} ({number})"
            q = f"q{(i * 3 + number) % queues}"
            channels.append(Channel(name, number, "/", "app", conn.name, "", 50, 0, 10, 0, True, False, 1,
                                    "running", MessageStats(publish=n, confirm=n, deliver_get=n, ack=n)))
            consumers.append(Consumer("/", q, f"ctag-{name}", name, conn.name, "", "app", 50, True, False, True))
    qs = [Queue("/", f"q{i}", "classic", True, False, False, "running", "rabbit@a", 5, 10, 15, 1, 1.0,
                MessageStats(publish=n, deliver_get=n, ack=n, redeliver=0, get=0, get_no_ack=0), **settings(i))
          for i in range(queues)]
    return attributed(Snapshot(1_800_000_000.0 + poll * INTERVAL, Overview("3.13.7", "26", "3.13.7", "a", False,
                                                                           MessageStats()),
                               connections=tuple(conns), channels=tuple(channels), consumers=tuple(consumers),
                               queues=tuple(qs)))


def run(polls: int, queues: int, connections: int, windowed: bool, traced: bool,
        aged: bool = False, gone: bool = False) -> tuple[list[float], float]:
    """Per-poll diagnosis times, and (when `traced`: tracemalloc slows allocation, so times are taken in
    a run of their own) the memory still held after the last poll: the previous poll and the window."""
    thresholds = Thresholds()
    recent = Recent(thresholds.window_seconds)
    waiting = Waiting()
    departures = Departures(thresholds.window_seconds)
    previous, times = None, []
    gc.collect()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else 0
    for poll in range(polls):
        snapshot = broker(poll, queues, connections)
        started = time.perf_counter()
        window = recent.start(snapshot) if windowed else None
        oldest = waiting.update(snapshot) if aged else None
        departed = departures.update(snapshot, window or previous) if gone else None
        diagnose(Context(snapshot, previous, (), thresholds, window=window, oldest=oldest, departed=departed))
        times.append(time.perf_counter() - started)
        previous = snapshot
    del snapshot
    gc.collect()
    held = (tracemalloc.get_traced_memory()[0] - base) / 2**20 if traced else 0.0
    if traced:
        tracemalloc.stop()
    return times, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--polls", type=int, default=60)
    args = parser.parse_args()
    print(f"{args.queues} queues, {args.connections * 3} channels and consumers, {args.connections} connections; "
          f"{args.polls} polls {INTERVAL:g} s apart (window 300 s)")
    print(f"{'judged against':<28} {'p50 ms':>8} {'p99 ms':>8} {'held MiB':>9}")
    for label, windowed, aged, gone in (("previous poll only (before)", False, False, False),
                                        ("5-minute window (after)", True, False, False),
                                        ("window + oldest message (41)", True, True, False),
                                        ("... + what went (departures)", True, True, True)):
        times, _ = run(args.polls, args.queues, args.connections, windowed, traced=False, aged=aged, gone=gone)
        _, held = run(args.polls, args.queues, args.connections, windowed, traced=True, aged=aged, gone=gone)
        p50, p99 = sample_quantile(times, 0.5), sample_quantile(times, 0.99)
        print(f"{label:<28} {p50 * 1000:8.1f} {p99 * 1000:8.1f} {held:9.1f}")


if __name__ == "__main__":
    main()
