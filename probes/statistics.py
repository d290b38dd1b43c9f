"""The probes' statistics, kept as data: the runner counts and observes here, from its I/O thread; readers
(the rules, /metrics, /api/probes) take an immutable ackscope.model.probes.ProbeStats at any moment.

Latency buckets are fine enough that a percentile interpolated within them is within 10 % of the exact one
between 0.5 ms and 5 s, and reach 30 s.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from types import MappingProxyType

from ackscope.model.probes import Histogram, ProbeStats, TargetStats

from .targets import Target

# The E12 series (twelve steps a decade, each about 1.2 times the last) from 0.1 ms to 10 s, and 30 s: the
# bucket-interpolated p50 and p99 fall within 10 % of the exact per-message percentiles (measured against
# the event log in bench/probe_truth.py; a coarser 1-1.5-2-3-5 ladder was off by up to 42 % at p99).
E12 = (1.0, 1.2, 1.5, 1.8, 2.2, 2.7, 3.3, 3.9, 4.7, 5.6, 6.8, 8.2)
LATENCY_BUCKETS = (*(round(m * 10.0 ** e, 6) for e in range(-4, 1) for m in E12), 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)
HISTOGRAMS = {"confirm_latency_seconds": LATENCY_BUCKETS, "confirm_batch_size": BATCH_BUCKETS,
              "delivery_latency_seconds": LATENCY_BUCKETS, "redelivery_latency_seconds": LATENCY_BUCKETS}
COUNTERS = ("published", "confirmed", "nacked", "returned", "confirm_timeouts", "republished", "held_back",
            "delivered", "redelivered", "requeued", "duplicates", "out_of_order_first", "out_of_order_redelivered",
            "lost", "reconnects", "consumer_cancels")
GAUGES = ("consumer_unacked", "consumer_prefetch", "consumers", "awaiting_delivery", "oldest_awaiting_seconds")
ROLES = ("publisher", "consumer")


class Bucketed:
    """One histogram's per-bucket (not cumulative) counts, the last one +Inf, and its sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # a bucket holds values up to its bound, inclusive
        self.sum += value

    def frozen(self) -> Histogram:
        cumulative, running = [], 0
        for bound, n in zip((*self.bounds, math.inf), self.counts):
            running += n
            cumulative.append((float(bound), float(running)))
        return Histogram(tuple(cumulative), self.sum)


class _Target:
    __slots__ = ("target", "up", "counters", "gauges", "histograms")

    def __init__(self, target: Target):
        self.target = target
        self.up = False
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.gauges = {**dict.fromkeys(GAUGES, 0), "consumer_prefetch": target.prefetch}
        self.histograms = {name: Bucketed(bounds) for name, bounds in HISTOGRAMS.items()}


class ProbeStatistics:
    """Counters, gauges and histograms per target. Every target starts at zero (down), so a probe that
    never connected still shows its series."""

    def __init__(self, targets: tuple[Target, ...] = ()):
        self._lock = threading.Lock()
        self._targets = {t.name: _Target(t) for t in targets}
        self._blocked = False
        self._connection_failures = dict.fromkeys(ROLES, 0)
        self._entries: dict[str, str] = {}  # role -> the node its connection is on, while it is open
        # (target, entry node) -> confirm latency through that node: few entries, so a bounded set of series
        self._by_entry: dict[tuple[str, str], Bucketed] = {}

    def count(self, t: Target, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._targets[t.name].counters[name] += n

    def observe(self, t: Target, histogram: str, value: float) -> None:
        with self._lock:
            self._targets[t.name].histograms[histogram].observe(value)

    def observe_entry(self, t: Target, entry: str, latency_s: float) -> None:
        with self._lock:
            h = self._by_entry.get((t.name, entry))
            if h is None:
                h = self._by_entry[(t.name, entry)] = Bucketed(LATENCY_BUCKETS)
            h.observe(latency_s)

    def set_entry(self, role: str, entry: str | None) -> None:
        with self._lock:
            if entry is None:
                self._entries.pop(role, None)
            else:
                self._entries[role] = entry

    def set_gauge(self, t: Target, name: str, value: float) -> None:
        with self._lock:
            self._targets[t.name].gauges[name] = value

    def set_up(self, t: Target, up: bool) -> None:
        with self._lock:
            self._targets[t.name].up = up

    def set_blocked(self, blocked: bool) -> None:
        with self._lock:
            self._blocked = blocked

    def connection_failed(self, role: str) -> None:
        with self._lock:
            self._connection_failures[role] += 1

    def snapshot(self, now: float | None = None) -> ProbeStats:
        with self._lock:
            targets = tuple(
                TargetStats(target=s.target.name, queue_type=s.target.queue_type, persistent=s.target.persistent,
                            up=s.up, counters=MappingProxyType({k: float(v) for k, v in s.counters.items()}),
                            histograms=MappingProxyType({k: h.frozen() for k, h in s.histograms.items()}),
                            gauges=MappingProxyType({k: float(v) for k, v in s.gauges.items()}))
                for _, s in sorted(self._targets.items()))
            return ProbeStats(time.time() if now is None else now, targets, self._blocked,
                              MappingProxyType({k: float(v) for k, v in self._connection_failures.items()}),
                              MappingProxyType(dict(self._entries)),
                              MappingProxyType({k: h.frozen() for k, h in sorted(self._by_entry.items())}))
